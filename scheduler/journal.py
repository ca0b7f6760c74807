"""What changed lately, for the live view (``picture.py``): gangs placed, done (every member bound or being
bound), preempting, timed out, reserving, invalid, deleted.

A stage like the others (``stages.py``), registered last so that it is told each decision after the
policies acted on it. It keeps the latest :data:`LENGTH` entries in memory; nothing is written to the API,
and a new leader starts with none.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from scheduler.clock import Clock
from scheduler.decision import Code, Outcome, Reason
from scheduler.gangs import GangError, GangKey, GangSpec
from scheduler.stages import GangNews, Stage

LENGTH = 200


@dataclass(frozen=True, slots=True)
class Entry:
    at: float  # wall seconds
    gang: str
    #: placed, done, preempting, timed out, reserving, invalid or deleted.
    what: str
    note: str


class Journal(Stage):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._entries: deque[Entry] = deque(maxlen=LENGTH)
        #: Gangs told done since they were last placed (a done gang is told so at each of its pods' events), and
        #: gangs told deleted (the binder may give back a gang that is gone already).
        self._done: set[str] = set()
        self._deleted: dict[str, None] = {}  # oldest first; forgetting the oldest risks a repeated line only

    def entries(self) -> list[Entry]:
        """Newest first."""
        return list(reversed(self._entries))

    def recorded(self, gang: GangSpec | GangError, outcome: Outcome) -> tuple[GangKey, ...]:
        what, note = _worth_telling(outcome)
        if outcome.code is not Code.PLACED:
            self._done.discard(str(gang.key))
        self._deleted.pop(str(gang.key), None)
        if what:
            self._entries.append(Entry(self.clock.wall(), str(gang.key), what, note))
        return ()

    def told(self, gang: GangKey, news: GangNews) -> tuple[GangKey, ...]:
        key = str(gang)
        if news is GangNews.DONE and key not in self._done:
            self._done.add(key)
            self._entries.append(Entry(self.clock.wall(), key, "done", "every member is bound or being bound"))
        elif news is GangNews.DELETED and key not in self._deleted:
            self._done.discard(key)
            self._deleted[key] = None
            if len(self._deleted) > 4 * LENGTH:
                del self._deleted[next(iter(self._deleted))]
            self._entries.append(Entry(self.clock.wall(), key, "deleted", ""))
        return ()

    def lost_lead(self) -> None:
        self._entries.clear()
        self._done.clear()
        self._deleted.clear()


def _worth_telling(outcome: Outcome) -> tuple[str, str]:
    """What a decision was, in a word, and its note; empty for the decisions made over and over (a gang that
    still does not fit, one that still waits for members)."""
    if outcome.code is Code.SCHEDULED:
        return "placed", outcome.message
    if outcome.code is Code.PREEMPTING and outcome.victims is not None:
        victims = outcome.victims
        return "preempting", f"{len(victims.pods)} pod(s) in {victims.domain}"
    if outcome.reason is Reason.GANG_TIMEOUT:
        return "timed out", outcome.message
    if outcome.reserving:
        return "reserving", outcome.reserving
    if outcome.code is Code.INVALID:
        return "invalid", outcome.message
    return "", ""
