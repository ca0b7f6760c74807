"""Whose room keeps a gang out, when it is held for someone else.

A placement that fails is told why by the placement engine ("the largest rack fits 1"). When the room it
lacks is there but held for another gang, the pods must say whose it is, or an operator sees idle GPUs and
a message that says there are none. Two kinds are explained here (domain reservations of starving gangs
say so themselves, ``starvation.held_back_note``):

- room a waiting gang holds for members that do not exist yet (``permit``): "held for gang x, which waits
  for 1 member(s) that do not exist yet (until they arrive, or 25 s more)";
- room a running gang's lost member left, kept for its replacement (``vacancies``).

Each is found by one more placement with that room given back, made only when the placement failed and
some such room stands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from scheduler.clock import Clock
from scheduler.gangs import GangKey, GangSpec
from scheduler.permit.holds import Permit, Placeholder
from scheduler.permit.missing import absent
from scheduler.settings import Settings
from scheduler.stages import Hidden, Rooms, hidden_by_all, hiding
from scheduler.state import ClusterView
from scheduler.vacancies import Vacancies
from topology import GangRequest, Infeasible, Placer
from topology.quantities import RequestItems


class WhoseRoom:
    def __init__(
        self,
        *,
        state: ClusterView,
        permit: Permit,
        vacancies: Vacancies,
        placer: Placer,
        settings: Settings,
        clock: Clock,
    ) -> None:
        self.state = state
        self.permit = permit
        self.vacancies = vacancies
        self.placer = placer
        self.settings = settings
        self.clock = clock

    def note(self, spec: GangSpec, request: GangRequest, others: Sequence[Hidden]) -> str:
        """Sentences naming the gangs whose held or kept room would let ``request`` fit (empty when none
        would). ``others`` is the other room the failed placement saw taken: taken here too."""
        nominated, reserved = hidden_by_all(others)
        notes = []
        vacant = self.vacancies.hidden_from(spec.key, spec.priority)
        if vacant:
            used = self._used(request, nominated, reserved)
            if used is not None:
                notes.extend(self._vacancy_notes(spec.key, spec.priority, used))
        placeholders = self.permit.held_by_others(spec.key)
        if placeholders:
            given_back = self._rows(
                (p.node, tuple(sorted(p.requests.items()))) for ps in placeholders.values() for p in ps
            )
            if given_back is not None:
                rows, amounts = given_back
                used = self._used(request, nominated + vacant, [*reserved, (rows, -amounts)])
                if used is not None:
                    notes.extend(self._placeholder_notes(placeholders, used))
        if not notes:
            return ""
        joined = "; ".join(notes)
        return f" {joined[0].upper()}{joined[1:]}."

    def _used(
        self, request: GangRequest, hidden: list[tuple[str, RequestItems]], taken: list[Rooms]
    ) -> set[str] | None:
        """The nodes a placement uses with only ``hidden`` and ``taken`` taken (None when it still fails)."""
        snapshot = self.state.snapshot
        with hiding(snapshot, hidden, taken):
            placed = self.placer(snapshot, request, max_tries=self.settings.placement.max_domain_tries)
        if isinstance(placed, Infeasible):
            return None
        return {assignment.node for assignment in placed.assignments}

    def _rows(self, room: Iterable[tuple[str, RequestItems]]) -> Rooms | None:
        snapshot = self.state.snapshot
        rows, amounts = [], []
        for node, requests in room:
            row = snapshot.index_of(node)
            if row is not None:
                rows.append(row)
                amounts.append(snapshot.request_vector(requests).vector)
        if not rows:
            return None
        return np.array(rows, dtype=np.int64), np.stack(amounts)

    def _vacancy_notes(self, gang: GangKey, priority: int, used: set[str]) -> list[str]:
        now = self.clock.monotonic()
        notes = []
        for owner, vacancies in sorted(self.vacancies.kept_from(gang, priority).items()):
            mine = [vacancy for vacancy in vacancies if vacancy.node in used]
            if mine:
                left = max(vacancy.deadline for vacancy in mine) - now
                notes.append(
                    f"room on {_nodes(len({v.node for v in mine}))} is kept for gang {owner}, whose member "
                    f"{mine[0].pod} failed or was deleted, for its replacement ({left:.0f} s more)"
                )
        return notes

    def _placeholder_notes(self, placeholders: dict[GangKey, list[Placeholder]], used: set[str]) -> list[str]:
        now = self.clock.monotonic()
        notes = []
        for owner, held in sorted(placeholders.items()):
            nodes = {placeholder.node for placeholder in held} & used
            spec = self.state.index.get(owner)
            if not nodes or not isinstance(spec, GangSpec):
                continue
            hold = self.permit.hold_of(owner)
            left = max(0.0, hold.deadline - now)
            notes.append(
                f"room on {_nodes(len(nodes))} is held for gang {owner}, which waits for "
                f"{absent(spec, hold.missing)} (until they arrive, or {left:.0f} s more)"
            )
        return notes


def _nodes(count: int) -> str:
    return f"{count} node{'s' if count != 1 else ''}"
