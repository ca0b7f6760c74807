"""One YAML file, validated at start: every problem names its key."""

from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from scheduler.gangs import SettingsError
from scheduler.settings import POSITIVE, SECTIONS, Settings, load_settings, parse_settings, yaml_key

FULL = """
schedulerNames: [phalanx, phalanx-gpu]
topology:
  levels: [example.com/block, example.com/rack, kubernetes.io/hostname]
gangs:
  annotationPrefix: example.com/gang
  gangScheduleTimeoutSecondLimit: 120
  gangScheduleDefaultTimeoutSeconds: 20
  gangScheduleTimeoutJitterSecond: 10
queue: {initialBackoffSeconds: 2, maxBackoffSeconds: 30}
placement: {maxDomainTries: 8}
permit: {maxReservedShare: 0.25}
binding: {concurrency: 32, writesPerSecond: 200, burst: 400, assumeTimeoutSeconds: 60}
leaderElection: {enabled: false, namespace: sched, name: lead, leaseDurationSeconds: 20, renewDeadlineSeconds: 15,
                 retryPeriodSeconds: 3}
server: {address: "0.0.0.0:9090"}
reporting: {eventIntervalSeconds: 60, statusIntervalSeconds: 2}
informers: {watchTimeoutSeconds: 600}
"""


def test_a_full_configuration_is_read(tmp_path: Path) -> None:
    path = tmp_path / "phalanx.yaml"
    path.write_text(FULL)
    settings = load_settings(path)
    assert settings.scheduler_names == ("phalanx", "phalanx-gpu")
    assert settings.levels == ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
    assert (settings.gangs.annotation_prefix, settings.gangs.timeout_limit_seconds) == ("example.com/gang", 120)
    assert (settings.gangs.default_timeout_seconds, settings.gangs.timeout_jitter_seconds) == (20, 10)
    assert settings.binding.concurrency == 32 and settings.permit.max_reserved_share == 0.25
    assert settings.leader_election.namespace == "sched" and not settings.leader_election.enabled
    gang_settings = settings.gang_settings()
    assert gang_settings.scheduler_names == frozenset({"phalanx", "phalanx-gpu"})
    assert gang_settings.tiers == ("example.com/rack", "example.com/block")


def test_defaults_are_documented_values() -> None:
    settings = parse_settings({})
    assert settings == Settings()
    assert (settings.queue.initial_backoff_seconds, settings.queue.max_backoff_seconds) == (1.0, 60.0)
    assert (settings.binding.concurrency, settings.binding.writes_per_second, settings.binding.burst) == (64, 500, 1000)
    assert settings.permit.max_reserved_share == 0.5
    leader = settings.leader_election
    assert (leader.lease_duration_seconds, leader.renew_deadline_seconds, leader.retry_period_seconds) == (15, 10, 2)


def test_the_documented_example_configuration_is_every_setting_at_its_default() -> None:
    path = Path(__file__).resolve().parents[2] / "manifests" / "phalanx.yaml"
    assert load_settings(path) == Settings()
    readme = (path.parents[1] / "README.md").read_text()
    documented = readme.split("## Running the scheduler")[1].split("```yaml\n")[1].split("```")[0]
    assert documented in path.read_text()
    raw = yaml.safe_load(documented)
    for section, cls in SECTIONS.items():  # a setting added to the code but not to the docs fails here
        assert set(raw[section]) == {yaml_key(item.name) for item in fields(cls)}, section


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("bindings: {}", "bindings: unknown setting; did you mean 'binding'?"),
        ("binding: {concurency: 3}", "binding.concurency: unknown setting; did you mean 'concurrency'?"),
        ("binding: {concurrency: many}", "binding.concurrency: must be a number, got 'many'"),
        ("binding: {concurrency: 2.5}", "binding.concurrency: must be a whole number, got 2.5"),
        ("queue: {maxBackoffSeconds: -1}", "queue.maxBackoffSeconds: must not be negative, got -1"),
        ("permit: {maxReservedShare: 2}", "permit.maxReservedShare: must be above 0 and at most 1, got 2.0"),
        ("leaderElection: {enabled: maybe}", "leaderElection.enabled: must be true or false, got 'maybe'"),
        (
            "leaderElection: {renewDeadlineSeconds: 20}",
            "leaderElection: retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds must hold, "
            "got 2.0, 20.0, 15.0",
        ),
        ("topology: {levels: [a, a]}", "topology.levels: must not repeat a key, got ['a', 'a']"),
        (
            "server: {address: nowhere}",
            "server.address: must be HOST:PORT with a port up to 65535, e.g. 0.0.0.0:10251, got 'nowhere'",
        ),
        ("placement: {maxDomainTries: 0}", "placement.maxDomainTries: must be positive, got 0"),
        (
            "informers: {watchTimeoutSeconds: 0.5}",
            "informers.watchTimeoutSeconds: must be at least 1 (the API server takes whole seconds), got 0.5",
        ),
        ("queue: {initialBackoffSeconds: .nan}", "queue.initialBackoffSeconds: must be a finite number, got nan"),
        ("permit: {maxCooldownSeconds: .inf}", "permit.maxCooldownSeconds: must be a finite number, got inf"),
        (
            "gangs: {gangScheduleTimeoutSecondLimt: 5}",
            "gangs.gangScheduleTimeoutSecondLimt: unknown setting; did you mean 'gangScheduleTimeoutSecondLimit'?",
        ),
        (
            "gangs: {schedulerName: x}",
            "gangs.schedulerName: 'x' is not among schedulerNames ['phalanx'], which alone choose Phalanx's pods: add "
            "it there (schedulerNames: [phalanx, x])",
        ),
        (
            "topology: {levels: [example.com/rack, rack name]}",
            "topology.levels: 'rack name' is not a node label key: a label key's name must be 63 characters or "
            "fewer, start and end with a letter or digit, and contain only letters, digits, '-', '_' and '.'",
        ),
        (
            "gangs: {gangScheduleTimeoutSecondLimit: 1, gangScheduleTimeoutSecondsLimit: 2}",
            "gangs.gangScheduleTimeoutSecondLimit and gangScheduleTimeoutSecondsLimit are the same setting "
            "but were given different values",
        ),
        ("- a list", "the configuration must be a mapping of settings"),
    ],
)
def test_a_bad_setting_is_named(tmp_path: Path, yaml_text: str, message: str) -> None:
    path = tmp_path / "phalanx.yaml"
    path.write_text(yaml_text)
    with pytest.raises(SettingsError) as raised:
        load_settings(path)
    assert str(raised.value) == f"{path}: {message}"


@pytest.mark.parametrize("key", POSITIVE)
def test_a_setting_that_must_be_positive_is_refused_at_zero(key: str) -> None:
    """Each of these at zero loops without a pause or lets nothing through (``placement.maxDomainTries: 0``
    was taken, then crashed the scheduler at its first pending pod)."""
    section, name = key.split(".")
    assert name in {yaml_key(item.name) for item in fields(SECTIONS[section])}  # a setting, spelled as in YAML
    with pytest.raises(SettingsError) as raised:
        parse_settings({section: {name: 0}})
    assert str(raised.value).startswith(f"{key}: must be positive")


def test_command_line_overrides_apply_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "phalanx.yaml"
    path.write_text("binding: {concurrency: 8}\n")
    settings = load_settings(path, ["binding.concurrency=16", "schedulerNames=[a,b]", "leaderElection.enabled=false"])
    assert settings.binding.concurrency == 16 and settings.scheduler_names == ("a", "b")
    assert not settings.leader_election.enabled
    with pytest.raises(SettingsError, match=r"use key\.path=value"):
        load_settings(None, ["binding.concurrency"])


def test_pfn_s_schedulername_argument_copied_under_gangs_is_taken_when_it_agrees_with_schedulernames() -> None:
    """A ``pluginConfig`` copied whole names its scheduler: harmless when it is one Phalanx owns, refused (above)
    when it is not, since it would not make Phalanx take that scheduler's pods."""
    assert parse_settings({"gangs": {"schedulerName": "phalanx"}}).scheduler_names == ("phalanx",)
    both = parse_settings({"schedulerNames": ["phalanx", "gpu"], "gangs": {"schedulerName": "gpu"}})
    assert both.gang_settings().scheduler_names == frozenset({"phalanx", "gpu"})


def test_a_configuration_that_is_not_yaml_says_where_and_what_the_parser_found(tmp_path: Path) -> None:
    path = tmp_path / "phalanx.yaml"
    path.write_text("binding: concurrency: 3\n")
    with pytest.raises(SettingsError) as raised:
        load_settings(path)
    assert str(raised.value) == f"{path}: not valid YAML at line 1: mapping values are not allowed here"


def test_a_set_value_that_is_not_yaml_says_so_and_how_to_quote_it() -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(None, ["binding.concurrency=["])
    assert str(raised.value).startswith("--set 'binding.concurrency=[': the value is not valid YAML at line 1: ")
    assert str(raised.value).endswith(
        "; a string that starts with [ is quoted in YAML: --set \"binding.concurrency='...'\""
    )
    assert load_settings(None, ["schedulerNames='[x'"]).scheduler_names == ("[x",)


def test_a_command_s_own_flag_is_taken_as_typed_and_its_problem_told_by_its_name() -> None:
    """``--metrics-address 18558`` was read as YAML, a number, and refused as ``server.address: must be a
    string``; a flag's value is its text (a port alone is every address), and an error names the flag typed."""
    assert load_settings(None, [], [("--metrics-address", "server.address", "18558")]).server.address == "18558"
    flag = [("--metrics-address", "server.address", "127.0.0.1:99999")]
    with pytest.raises(SettingsError) as raised:
        load_settings(None, [], flag)
    assert str(raised.value) == (
        "--metrics-address: must be HOST:PORT with a port up to 65535, e.g. 0.0.0.0:10251, got '127.0.0.1:99999'"
    )
    levels = [("--levels", "topology.levels", "example.com/rack, kubernetes.io/hostname")]
    assert load_settings(None, [], levels).levels == ("example.com/rack", "kubernetes.io/hostname")
    assert load_settings(None, ["topology.levels=[a]"], levels).levels == ("a",)  # README: each --set comes last
    with pytest.raises(SettingsError) as raised:  # a --set that replaced a flag's value is told as itself
        load_settings(None, ["server.address=nowhere"], flag)
    assert str(raised.value).startswith("server.address: must be HOST:PORT")


def test_a_renamed_setting_is_still_read_under_its_old_name_and_said_to_be_renamed() -> None:
    """``starvation.maxHoldSeconds`` became ``maxReserveSeconds`` (a reservation is not a permit's hold):
    a configuration written before still works, and the command warns of it."""
    old = parse_settings({"starvation": {"maxHoldSeconds": 600}})
    assert old.starvation.max_reserve_seconds == 600
    assert old.renamed == ("starvation.maxHoldSeconds -> starvation.maxReserveSeconds",)
    new = parse_settings({"starvation": {"maxReserveSeconds": 600}})
    assert new.starvation.max_reserve_seconds == 600 and new.renamed == ()
    with pytest.raises(SettingsError, match="maxHoldSeconds: renamed maxReserveSeconds, and both are given"):
        parse_settings({"starvation": {"maxHoldSeconds": 600, "maxReserveSeconds": 900}})
