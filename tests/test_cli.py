"""The `phalanx` command as a user meets it."""

import pytest

from scheduler.cli import main


def test_demo_places_the_sample_workload_and_explains_the_gang_that_cannot_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "team-a/pretrain    placed       12  [A] block b0 (2 racks)" in out
    assert (
        "team-e/huge        pending       0  24/64 nodes are available: 40 Insufficient nvidia.com/gpu. "
        "Gang team-e/huge needs 40 pods in one example.com/block; the largest block fits 24." in out
    )
    assert "  b1-r3   ........ ........" in out  # a whole rack left free


@pytest.mark.parametrize("argv", [["--no-such-flag"], ["frobnicate"], ["demo", "--extra"]])
def test_a_bad_command_line_is_one_readable_line_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("phalanx") and "--help" in err


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "demo" in capsys.readouterr().err
