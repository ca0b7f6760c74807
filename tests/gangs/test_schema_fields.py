"""Phalanx reads the upstream gang API as each version spells it: 1.37's versions (not served by the 1.36
server of the real-server suite, which checks ``v1alpha2`` against the server's own OpenAPI) against the
field paths of their Go types, extracted into ``data/scheduling-k8s-io-1.37.json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.gangs.upstream import FIELDS_READ

TYPES_1_37 = json.loads((Path(__file__).parent / "data" / "scheduling-k8s-io-1.37.json").read_text())["versions"]


@pytest.mark.parametrize("version", sorted(TYPES_1_37))
def test_every_field_read_in_a_1_37_version_is_in_its_types(version: str) -> None:
    for kind, paths in FIELDS_READ[version].items():
        missing = [path for path in paths if path not in TYPES_1_37[version][kind]]
        assert not missing, f"{version} {kind}: {missing} are not fields of the upstream types"


def test_the_check_would_catch_a_rename() -> None:
    # 1.36's pre-release spelling, read for old objects, is no field of 1.37's PodGroup.
    assert "spec.schedulingConstraints.topologyConstraints[].topologyKey" not in TYPES_1_37["v1beta1"]["PodGroup"]
