"""Phalanx's configuration: one YAML file, validated at start, overridable from the command line.

Every key is camelCase in YAML (``binding.writesPerSecond``) and snake_case here. Unknown keys, wrong
types and out-of-range values are errors that name the key, so a typo never silently falls back to a
default. The schema and defaults are documented in the README.
"""

from __future__ import annotations

import difflib
import math
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from scheduler.gangs.fields import label_key_problem
from scheduler.gangs.gang_settings import GANG_SPELLINGS, GangSettings, SettingsError

DEFAULT_SCHEDULER_NAMES = ("phalanx",)
DEFAULT_LEVELS = ("topology.kubernetes.io/zone", "example.com/block", "example.com/rack", "kubernetes.io/hostname")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSettings:
    initial_backoff_seconds: float = 1.0
    """First wait after a failed attempt; it doubles on each failure (with jitter) up to the maximum."""
    max_backoff_seconds: float = 60.0
    """Longest wait between attempts when no cluster event could change the answer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementSettings:
    max_domain_tries: int = 16
    """Candidate domains tried per constrained part of a gang before the attempt fails."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PermitSettings:
    max_reserved_share: float = 0.5
    """At most this share of the cluster's allocatable (per resource) may be held for members of
    waiting gangs that do not exist yet, so that waiting gangs cannot starve or deadlock the rest."""
    max_cooldown_seconds: float = 600.0
    """A gang whose hold timed out may hold room again only after its timeout, doubled at each
    timeout in a row, and never later than this."""
    replacement_grace_seconds: float = 60.0
    """A member of a running gang that fails or is deleted (not preempted) leaves its room to its
    replacement for this long (the Job controller recreates after 10 s, then 20 s, ...): gangs of equal or
    lower priority see it taken. 0 keeps nothing."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionSettings:
    enabled: bool = True
    """A gang that does not fit may evict pods of strictly lower priority to make room."""
    max_domains_tried: int = 4
    """Candidate domains (racks, blocks, ...) examined per decision, the cheapest-looking first (a
    vectorized estimate: clear each domain's cheapest nodes until the gang fits)."""
    nomination_timeout_seconds: float = 300.0
    """How long a preemptor's room is held while its victims terminate (at least twice their longest
    grace period); then the plan is dropped and the gang evaluated again (victims still terminating are
    not chosen again)."""
    refused_retry_seconds: float = 60.0
    """How often a victim whose DELETE the API server refused for good (RBAC, an admission policy) is tried
    again: the rest of its unit is gone, so it is never given up."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StarvationSettings:
    enabled: bool = True
    """The most important gang that has waited too long gets the room freeing up in one domain."""
    reserve_after_seconds: float = 300.0
    """How long a gang waits (since its creation) before it may reserve a domain."""
    max_reservations: int = 1
    """Reservations standing at once per topology level (racks, blocks, nodes, the whole cluster)."""
    max_reserve_seconds: float = 1800.0
    """A reservation that has not let its gang bind after this long is released, and the next domain
    is tried (its former name, ``maxHoldSeconds``, is still read: a reservation is not a permit's hold)."""
    runtime_history: int = 1000
    """Runtimes kept per kind of pod (namespace, priority, request) to guess when pods without
    ``activeDeadlineSeconds`` end (``scheduler/runtimes.py``); 0 learns nothing (such pods may run forever)."""
    backfill_confidence: float = 0.99
    """A gang whose pods set no deadline uses a reservation's room only if its kind of pod has ended before
    the reservation could start in this share of the runs seen, taking the reserved nodes to empty as soon
    as the first ``1 -`` this share of their pods' kinds would. High, because jobs come in bursts that run
    alike: a kind seen to end within seconds 19 times in 20 can next bring ten that run for hours, and each
    one let into held room keeps those nodes from the reserved gang for as long as it runs."""


#: The most writer processes a configuration may ask for.
MOST_WRITER_PROCESSES = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class BindingSettings:
    concurrency: int = 64
    """Binding requests in flight at once."""
    writes_per_second: float = 500.0
    """Client-side rate limit of API writes (binds, status, Events), as kube-scheduler's QPS."""
    burst: int = 1000
    """Writes allowed at once above the rate, as kube-scheduler's burst."""
    writer_processes: int | None = None
    """Processes that make the API writes the scheduler decided (binds, Events, status), each on a core of its
    own (``ports/kube/writers.py``). None (``auto`` in YAML): one per core the container may use but the
    deciding process's, at most 4 (none with one core). 0: the deciding process writes itself."""
    assume_timeout_seconds: float = 30.0
    """A bound pod the watch has not confirmed after this long is forgotten and its capacity released."""
    device_binding_timeout_seconds: float = 600.0
    """How long a gang's pods wait, allocated, for drivers to report their devices' binding conditions True
    before the allocation is taken back (kube-scheduler's ``bindingTimeout``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderSettings:
    enabled: bool = True
    """Only the holder of the Lease schedules; the others keep their caches warm."""
    namespace: str = "phalanx-system"
    name: str = "phalanx-scheduler"
    identity: str = ""
    """This replica's name in the Lease; defaults to the host name (the pod name in a Deployment)."""
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    address: str = "0.0.0.0:10251"
    """Where /metrics, /healthz and /readyz are served, and the live view (``kubectl port-forward`` reaches it)."""
    view: bool = True
    """The live view: a read-only page at / showing the cluster as Phalanx sees it, and its JSON at /api/."""
    view_from: str = "loopback"
    """Who the live view answers: ``loopback`` (``kubectl port-forward`` arrives on the pod's loopback; a
    request through the Service is refused, since the view names every tenant's gangs), or ``anywhere``."""
    view_hosts: tuple[str, ...] = ()
    """With ``viewFrom: loopback``, the names the view answers to besides ``localhost`` and loopback addresses:
    a browser sends the name it opened (the Host header), and a page of another site whose name was rebound
    to 127.0.0.1 sends its own (DNS rebinding). Name here a machine where ``kubectl port-forward --address``
    listens for others, as browsers reach it (``bastion.example.com``, ``10.0.0.5``)."""
    view_interval_seconds: float = 2.0
    """A picture for the view is taken at most this often, only while someone looks, and never so often that
    pictures take more than 5% of the scheduler's time (on a large cluster, less often)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportingSettings:
    event_interval_seconds: float = 30.0
    """The same Event on the same object is written at most this often (its series count is kept)."""
    status_interval_seconds: float = 1.0
    """Pod conditions and group status are written in batches this often, latest value only."""
    concurrency: int = 16
    """Event, condition and group status writes in flight at once (all under the binding's write rate)."""
    controller: str = "phalanx.dev/scheduler"
    """``reportingController`` of the Events Phalanx writes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InformerSettings:
    watch_timeout_seconds: float = 300.0
    """Each watch request ends after this long and resumes from the last resource version."""
    initial_backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    scheduler_names: tuple[str, ...] = DEFAULT_SCHEDULER_NAMES
    """Pods with one of these ``spec.schedulerName`` values are Phalanx's."""
    levels: tuple[str, ...] = DEFAULT_LEVELS
    """Topology levels as node label keys, broad to narrow (``topology.levels`` in YAML)."""
    gangs: GangSettings = field(default_factory=GangSettings)
    queue: QueueSettings = field(default_factory=QueueSettings)
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    permit: PermitSettings = field(default_factory=PermitSettings)
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    starvation: StarvationSettings = field(default_factory=StarvationSettings)
    binding: BindingSettings = field(default_factory=BindingSettings)
    leader_election: LeaderSettings = field(default_factory=LeaderSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    reporting: ReportingSettings = field(default_factory=ReportingSettings)
    informers: InformerSettings = field(default_factory=InformerSettings)
    renamed: tuple[str, ...] = ()
    """Keys the configuration gave under a former name, as ``old -> new`` (the command warns of each)."""

    def gang_settings(self) -> GangSettings:
        return replace(self.gangs, scheduler_names=frozenset(self.scheduler_names), levels=self.levels)

    @property
    def identity(self) -> str:
        return self.leader_election.identity or socket.gethostname()


SECTIONS: dict[str, type] = {
    "queue": QueueSettings,
    "placement": PlacementSettings,
    "permit": PermitSettings,
    "preemption": PreemptionSettings,
    "starvation": StarvationSettings,
    "binding": BindingSettings,
    "leaderElection": LeaderSettings,
    "server": ServerSettings,
    "reporting": ReportingSettings,
    "informers": InformerSettings,
}
_TOP = ("schedulerNames", "topology", "gangs", *SECTIONS)
#: The keys of the ``gangs`` section: PFN's gang plugin arguments, in both of their spellings.
GANG_KEYS = frozenset({"annotationPrefix", *(key for keys in GANG_SPELLINGS.values() for key in keys)})
#: Settings that must be above zero: a wait of zero loops without a pause, a limit of zero lets nothing through.
POSITIVE = (
    "queue.initialBackoffSeconds",
    "placement.maxDomainTries",
    "binding.assumeTimeoutSeconds",
    "binding.deviceBindingTimeoutSeconds",
    "leaderElection.retryPeriodSeconds",
    "reporting.statusIntervalSeconds",
    "informers.initialBackoffSeconds",
)
#: Keys that were renamed, by section: a configuration that uses the old name still works, with a warning.
RENAMED = {"starvation": {"maxHoldSeconds": "maxReserveSeconds"}}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def yaml_key(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _unknown(where: str, key: object, known: list[str]) -> SettingsError:
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return SettingsError(f"{where}{key}: unknown setting{hint}")


def _coerce(where: str, value: object, kind: Any) -> object:
    if kind == int | None:  # a whole number, or "auto" (the default, chosen at start)
        if value is None or value == "auto":
            return None
        if isinstance(value, str) and not value.isdigit():
            raise SettingsError(f"{where}: must be a whole number or auto, got {value!r}")
        return _coerce(where, value, int)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise SettingsError(f"{where}: must be true or false, got {value!r}")
    if kind in (int, float):
        if isinstance(value, str):
            try:
                value = kind(value)
            except ValueError:
                raise SettingsError(f"{where}: must be a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and isinstance(value, float)):
            raise SettingsError(f"{where}: must be {'a whole number' if kind is int else 'a number'}, got {value!r}")
        if not math.isfinite(value):
            raise SettingsError(f"{where}: must be a finite number, got {value}")
        if value < 0:
            raise SettingsError(f"{where}: must not be negative, got {value}")
        return kind(value)
    if kind == tuple[str, ...]:
        return _strings(value, where, allow_empty=True)
    if kind is str:
        if not isinstance(value, str):
            raise SettingsError(f"{where}: must be a string, got {value!r}")
        return value
    raise SettingsError(f"{where}: unsupported setting type")


def _section(cls: type, raw: object, where: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{where.rstrip('.')}: must be a mapping of settings")
    hints = get_type_hints(cls)
    names = {yaml_key(item.name): item.name for item in fields(cls)}
    values = {}
    for key, value in raw.items():
        if key not in names:
            raise _unknown(where, key, sorted(names))
        values[names[key]] = _coerce(f"{where}{key}", value, hints[names[key]])
    return cls(**values)


def _strings(raw: object, where: str, *, allow_empty: bool = False) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [item.strip() for item in raw.split(",") if item.strip()]
    if not isinstance(raw, list) or not all(isinstance(item, str) and item for item in raw):
        raise SettingsError(f"{where}: must be a list of strings")
    if not raw and not allow_empty:
        raise SettingsError(f"{where}: must not be empty")
    return tuple(raw)


def _renamed(raw: object, section: str, renamed: list[str]) -> object:
    """The section with its renamed keys under their new names (each noted in ``renamed``)."""
    names = RENAMED.get(section, {})
    if not isinstance(raw, Mapping) or not names.keys() & raw.keys():
        return raw
    moved = dict(raw)
    for old, new in names.items():
        if old in moved:
            if new in moved:
                raise SettingsError(f"{section}.{old}: renamed {new}, and both are given; keep {new}")
            moved[new] = moved.pop(old)
            renamed.append(f"{section}.{old} -> {section}.{new}")
    return moved


def parse_settings(raw: object) -> Settings:
    """Settings from a parsed YAML document (a mapping), with every problem named by its key."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise SettingsError("the configuration must be a mapping of settings")
    for key in raw:
        if key not in _TOP:
            raise _unknown("", key, list(_TOP))
    values: dict[str, Any] = {}
    if "schedulerNames" in raw:
        values["scheduler_names"] = _strings(raw["schedulerNames"], "schedulerNames")
    topology = raw.get("topology")
    if topology is not None:
        if not isinstance(topology, Mapping) or set(topology) - {"levels"}:
            raise SettingsError("topology: must be a mapping with one key, levels")
        values["levels"] = _strings(topology.get("levels", []), "topology.levels", allow_empty=True)
        for level in values["levels"]:
            problem = label_key_problem(level)
            if problem is not None:
                raise SettingsError(f"topology.levels: {level!r} is not a node label key: {problem}")
        if len(set(values["levels"])) != len(values["levels"]):
            raise SettingsError(f"topology.levels: must not repeat a key, got {list(values['levels'])}")
    gangs = raw.get("gangs")
    if gangs is not None:
        if not isinstance(gangs, Mapping):
            raise SettingsError("gangs: must be a mapping of settings")
        for key in gangs:
            if key not in GANG_KEYS and key != "schedulerName":
                raise _unknown("gangs.", key, sorted(GANG_KEYS))
        # PFN's plugin arguments name the scheduler too; copied here, it must agree with schedulerNames, which
        # alone chooses Phalanx's pods.
        named = gangs.get("schedulerName")
        owned = values.get("scheduler_names", DEFAULT_SCHEDULER_NAMES)
        if named is not None and named not in owned:
            raise SettingsError(
                f"gangs.schedulerName: {named!r} is not among schedulerNames {list(owned)}, which alone choose "
                f"Phalanx's pods: add it there (schedulerNames: [{', '.join([*owned, str(named)])}])"
            )
        plugin_args = {
            ("gangAnnotationPrefix" if key == "annotationPrefix" else key): value
            for key, value in gangs.items()
            if key != "schedulerName"
        }
        try:
            values["gangs"] = GangSettings.from_plugin_args(plugin_args)
        except SettingsError as error:
            raise SettingsError(f"gangs.{error}") from None
    renamed: list[str] = []
    for name, cls in SECTIONS.items():
        if name in raw:
            section = _renamed(raw[name], name, renamed)
            values[_snake(name)] = _section(cls, section, f"{name}.")
    settings = Settings(**values, renamed=tuple(renamed))
    _check(settings)
    return settings


def _setting(settings: Settings, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(settings, _snake(section)), _snake(name))


def _check(settings: Settings) -> None:
    for key in POSITIVE:
        if not _setting(settings, key) > 0:
            raise SettingsError(f"{key}: must be positive, got {_setting(settings, key)}")
    if settings.informers.watch_timeout_seconds < 1:
        raise SettingsError(
            f"informers.watchTimeoutSeconds: must be at least 1 (the API server takes whole seconds), got "
            f"{settings.informers.watch_timeout_seconds}"
        )
    if settings.informers.initial_backoff_seconds > settings.informers.max_backoff_seconds:
        raise SettingsError("informers.initialBackoffSeconds: must not exceed informers.maxBackoffSeconds")
    if settings.permit.max_cooldown_seconds <= 0:
        raise SettingsError("permit.maxCooldownSeconds: must be positive")
    if settings.permit.replacement_grace_seconds < 0:
        raise SettingsError("permit.replacementGraceSeconds: must not be negative (0 keeps no room)")
    if not 0 < settings.permit.max_reserved_share <= 1:
        share = settings.permit.max_reserved_share
        raise SettingsError(f"permit.maxReservedShare: must be above 0 and at most 1, got {share}")
    preemption = settings.preemption
    if min(preemption.max_domains_tried, preemption.nomination_timeout_seconds, preemption.refused_retry_seconds) <= 0:
        raise SettingsError(
            "preemption: maxDomainsTried, nominationTimeoutSeconds and refusedRetrySeconds must be positive"
        )
    if settings.starvation.runtime_history < 0 or not 0 < settings.starvation.backfill_confidence <= 1:
        raise SettingsError("starvation: runtimeHistory must be 0 or more and backfillConfidence above 0 and at most 1")
    if settings.starvation.max_reservations < 1 or settings.starvation.max_reserve_seconds <= 0:
        raise SettingsError(
            "starvation: maxReservations and maxReserveSeconds must be positive"
            " (to reserve nothing, set enabled: false)"
        )
    if settings.queue.initial_backoff_seconds > settings.queue.max_backoff_seconds:
        raise SettingsError("queue.initialBackoffSeconds: must not exceed queue.maxBackoffSeconds")
    if settings.binding.concurrency < 1 or settings.binding.burst < 1 or settings.binding.writes_per_second <= 0:
        raise SettingsError("binding: concurrency, burst and writesPerSecond must be positive")
    if settings.binding.writer_processes is not None and settings.binding.writer_processes > MOST_WRITER_PROCESSES:
        raise SettingsError(
            f"binding.writerProcesses: at most {MOST_WRITER_PROCESSES}, got {settings.binding.writer_processes} "
            "(past a few, the API server's write capacity is the limit, not the writers)"
        )
    if settings.reporting.concurrency < 1:
        raise SettingsError("reporting.concurrency: must be positive")
    leader = settings.leader_election
    if not leader.retry_period_seconds < leader.renew_deadline_seconds < leader.lease_duration_seconds:
        raise SettingsError(
            "leaderElection: retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds must hold, got "
            f"{leader.retry_period_seconds}, {leader.renew_deadline_seconds}, {leader.lease_duration_seconds}"
        )
    _, _, port = settings.server.address.rpartition(":")  # a port alone, or an empty host: every address
    if not port.isdigit() or int(port) > 65535:
        raise SettingsError(
            f"server.address: must be HOST:PORT with a port up to 65535, e.g. 0.0.0.0:10251, got "
            f"{settings.server.address!r}"
        )
    if not settings.server.view_interval_seconds > 0:  # (NaN too)
        raise SettingsError("server.viewIntervalSeconds: must be positive")
    if settings.server.view_from not in ("loopback", "anywhere"):
        raise SettingsError(f"server.viewFrom: loopback or anywhere, got {settings.server.view_from!r}")


def load_settings(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    flags: Sequence[tuple[str, str, object]] = (),
) -> Settings:
    """Read a YAML file (or start from defaults), apply ``flags``, then each ``key.path=value`` override
    (``--set``) in order. ``flags`` are ``(flag, key.path, value)`` for the command's own flags: their values
    are taken as given (not read as YAML), and a problem with one is told by the flag's name."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise SettingsError(f"{path}: {error.strerror or error}") from None
        except UnicodeDecodeError as error:
            raise SettingsError(f"{path}: not UTF-8 text (byte {error.start}); the configuration is YAML") from None
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            raise SettingsError(f"{path}: not valid YAML{_where_and_why(error)}") from None
        if not isinstance(raw, dict):
            raise SettingsError(f"{path}: the configuration must be a mapping of settings")
    for flag, key, given in flags:
        _place(raw, key, given, flag)
    for override in overrides or []:
        key, sep, value = override.partition("=")
        if not sep or not key:
            raise SettingsError(f"--set {override!r}: use key.path=value, e.g. binding.concurrency=32")
        try:
            parsed = yaml.safe_load(value) if value else ""
        except yaml.YAMLError as error:
            # A shell takes one pair of quotes off: the YAML's own must be inside another.
            hint = (
                f"; a string that starts with {value[0]} is quoted in YAML: --set \"{key}='...'\""
                if value[0] in _YAML_SIGNS
                else ""
            )
            raise SettingsError(
                f"--set {override!r}: the value is not valid YAML{_where_and_why(error)}{hint}"
            ) from None
        _place(raw, key, parsed, f"--set {override!r}")
    set_keys = {override.partition("=")[0] for override in overrides or []}
    try:
        return parse_settings(raw)
    except SettingsError as error:
        message = str(error)
        for flag, key, _ in flags:
            if key not in set_keys and message.startswith(f"{key}: "):
                raise SettingsError(f"{flag}{message.removeprefix(key)}") from None
        source = f"{path}: " if path is not None else ""
        raise SettingsError(f"{source}{message}") from None


#: The characters that make a YAML plain value something else when they start it.
_YAML_SIGNS = frozenset("[]{}&*!|>'\"%@`#,?:-")


def _place(raw: dict[str, Any], key: str, value: object, given_by: str) -> None:
    """Set ``key.path`` in the raw configuration to ``value``, making its sections as needed."""
    target = raw
    parts = key.split(".")
    for part in parts[:-1]:
        section = target.setdefault(part, {})
        if not isinstance(section, dict):
            raise SettingsError(f"{given_by}: {part} is not a section")
        target = section
    target[parts[-1]] = value


def _where_and_why(error: yaml.YAMLError) -> str:
    """`` at line 3: mapping values are not allowed here``, as much of it as the parser said."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None)
    return f"{where}: {problem}" if problem else where
