"""Suite-wide settings: deterministic hypothesis, so that a run on CI is the run you can repeat."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "phalanx",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("phalanx")
