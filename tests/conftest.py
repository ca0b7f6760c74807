"""Suite-wide settings: deterministic hypothesis, so that a run on CI is the run you can repeat; and the
tally of invariant checks the clusters' monitors made, printed at the end."""

from typing import Any

from hypothesis import HealthCheck, settings

settings.register_profile(
    "phalanx",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("phalanx")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.scheduler.support import CHECKS  # noqa: PLC0415  (only once the suite has run)

    if CHECKS:
        figures = ", ".join(f"{name} {count}" for name, count in sorted(CHECKS.items()))
        terminalreporter.write_line(f"invariant checks: {figures}; violations 0 (any would have failed its test)")
