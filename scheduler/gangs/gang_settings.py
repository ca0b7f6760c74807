"""Settings of the gang sources, with PFN's configuration keys accepted in both spellings.

PFN's gang plugin reads ``gangScheduleTimeoutSecondLimit``, ``gangScheduleDefaultTimeoutSecond`` and
``gangScheduleTimeoutJitterSecond`` while its README spells them with ``Seconds``; operators copy
either, so both are accepted (giving both with different values is an error).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from topology import HOSTNAME


class SettingsError(ValueError):
    """A configuration value that cannot be used; the message names the key."""


DEFAULT_PREFIX = "gang-scheduling.preferred.jp/gang"

GANG_SPELLINGS = {
    "annotation_prefix": ("gangAnnotationPrefix",),
    "timeout_limit_seconds": ("gangScheduleTimeoutSecondLimit", "gangScheduleTimeoutSecondsLimit"),
    "default_timeout_seconds": ("gangScheduleDefaultTimeoutSecond", "gangScheduleDefaultTimeoutSeconds"),
    "timeout_jitter_seconds": ("gangScheduleTimeoutJitterSecond", "gangScheduleTimeoutJitterSeconds"),
    "max_gang_size": ("maxGangSize",),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class GangSettings:
    scheduler_names: frozenset[str] = frozenset({"phalanx"})
    """Pods whose ``spec.schedulerName`` is one of these are Phalanx's; other pods only use capacity."""

    annotation_prefix: str = DEFAULT_PREFIX
    """Prefix of the PFN-style annotations ``<prefix>-name``, ``-size`` and ``-schedule-timeout-seconds``."""

    timeout_limit_seconds: float = 100.0
    """No annotation may ask for a longer wait than this (PFN's default)."""

    default_timeout_seconds: float = 30.0
    """The wait when no annotation or group field sets one (PFN's default)."""

    timeout_jitter_seconds: float = 30.0
    """Upper bound of the random extra wait added per attempt (PFN's default)."""

    max_gang_size: int = 10_000
    """A gang whose minimum needs more pods than this is invalid (a size typed with three zeros too many
    is an error to show, not a reservation to try)."""

    levels: tuple[str, ...] = ()
    """Configured topology levels, broad to narrow; Volcano tiers map onto them (see volcano.py)."""

    def __post_init__(self) -> None:
        if not self.annotation_prefix:
            raise SettingsError("gangAnnotationPrefix must not be empty")
        for name in ("timeout_limit_seconds", "default_timeout_seconds", "timeout_jitter_seconds"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise SettingsError(f"{GANG_SPELLINGS[name][0]} must be a finite number, got {value}")
            if value < 0:
                raise SettingsError(f"{GANG_SPELLINGS[name][0]} must not be negative, got {value}")
        if isinstance(self.max_gang_size, bool) or not isinstance(self.max_gang_size, int) or self.max_gang_size < 1:
            raise SettingsError(f"maxGangSize must be an integer of at least 1, got {self.max_gang_size!r}")

    @property
    def tiers(self) -> tuple[str, ...]:
        """Levels above the node, narrowest first: Volcano tier 1 is ``tiers[0]``."""
        return tuple(reversed([level for level in self.levels if level != HOSTNAME]))

    @staticmethod
    def from_plugin_args(args: Mapping[str, object], **overrides: object) -> GangSettings:
        """Read PFN gang plugin arguments (``pluginConfig[].args`` of a KubeSchedulerConfiguration)."""
        values: dict[str, object] = {}
        for attribute, keys in GANG_SPELLINGS.items():
            given = {key: args[key] for key in keys if key in args}
            if len(set(map(repr, given.values()))) > 1:
                raise SettingsError(f"{' and '.join(given)} are the same setting but were given different values")
            if given:
                key, value = next(iter(given.items()))
                if attribute == "annotation_prefix":
                    if not isinstance(value, str):
                        raise SettingsError(f"{key} must be a string, got {value!r}")
                elif attribute == "max_gang_size":
                    pass  # checked with the other values below

                elif isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise SettingsError(f"{key} must be a number of seconds, got {value!r}")
                values[attribute] = value
        unknown = set(args) - {key for keys in GANG_SPELLINGS.values() for key in keys} - {"schedulerName"}
        if unknown:
            raise SettingsError(f"unknown gang plugin setting(s): {', '.join(sorted(unknown))}")
        if isinstance(args.get("schedulerName"), str):
            values["scheduler_names"] = frozenset({args["schedulerName"]})
        allowed = {item.name for item in fields(GangSettings)}
        for name, value in overrides.items():
            if name not in allowed:
                raise SettingsError(f"unknown setting {name}")
            values[name] = value
        return GangSettings(**values)  # type: ignore[arg-type]
