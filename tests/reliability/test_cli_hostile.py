"""Every command given broken kubeconfigs, files and flags: a non-zero exit and one readable line, never a
traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.frontends.cli import main

KUBECONFIGS = {
    "missing": None,
    "empty": "",
    "not yaml": "{{{: [",
    "a list": "- a\n- b\n",
    "no contexts": "apiVersion: v1\nkind: Config\nclusters: []\n",
    "unknown context": "apiVersion: v1\nkind: Config\ncurrent-context: nope\ncontexts: []\nclusters: []\nusers: []\n",
    "wrong types": "apiVersion: v1\nkind: Config\ncurrent-context: 3\ncontexts: 7\nclusters: {a: 1}\nusers: x\n",
    "bad server": (
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'not a url'}}]\nusers: [{name: u, user: {token: t}}]\n"
    ),
}
COMMANDS = [["dry-run"], ["explain", "team/x"], ["run"]]


def one_line_failure(code: int, err: str) -> None:
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("phalanx: "), err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("case", sorted(KUBECONFIGS))
def test_a_broken_kubeconfig_is_one_readable_line(
    command: list[str], case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "kubeconfig"
    if KUBECONFIGS[case] is not None:
        path.write_text(KUBECONFIGS[case] or "")
    code = main([*command, "--kubeconfig", str(path)])
    one_line_failure(code, capsys.readouterr().err)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_random_bytes_as_any_input_file_never_show_a_traceback(
    content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "input"
    path.write_bytes(content)
    for argv in (
        ["dry-run", "--kubeconfig", str(path)],
        ["simulate", "--workload", str(path)],
        ["simulate", "--cluster", str(path)],
        ["simulate", "--config", str(path)],
    ):
        code = main(argv)
        err = capsys.readouterr().err
        if code != 0:
            one_line_failure(code, err)
