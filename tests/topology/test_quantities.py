"""Quantities parse exactly as the Kubernetes API parses them, and pods request what kube-scheduler counts."""

from fractions import Fraction

import pytest

from topology import QuantityError, SpecError, parse_quantity, pod_requests
from topology.quantities import MAX_AMOUNT, to_base_units

KI, MI, GI, TI = 1 << 10, 1 << 20, 1 << 30, 1 << 40
INT64_MAX = (1 << 63) - 1

# Cases from apimachinery's TestQuantityParse table, and the documented examples.
PARSES = [
    ("0", 0),
    ("0n", 0),
    ("0Ki", 0),
    ("1", 1),
    ("+1", 1),
    ("1Ki", KI),
    ("8Ki", 8 * KI),
    ("7Mi", 7 * MI),
    ("6Gi", 6 * GI),
    ("5Ti", 5 * TI),
    ("3Ei", 3 << 60),
    ("1.5Gi", 3 * GI // 2),
    ("0.5Mi", MI // 2),
    ("100.035Ki", Fraction(10243584, 100)),
    ("5n", Fraction(5, 10**9)),
    ("4u", Fraction(4, 10**6)),
    ("100m", Fraction(1, 10)),
    ("3m", Fraction(3, 1000)),
    ("1k", 1000),
    ("50k", 50_000),
    ("7M", 7 * 10**6),
    ("6G", 6 * 10**9),
    ("2P", 2 * 10**15),
    ("1E", 10**18),
    ("12E", 12 * 10**18),
    ("2e3", 2000),
    ("1E-3", Fraction(1, 1000)),
    ("1E6", 10**6),
    ("1.3E+6", 1_300_000),
    ("0.5e-2", Fraction(5, 1000)),
    ("0.5", Fraction(1, 2)),
    ("0.00050k", Fraction(1, 2)),
    ("10.035M", 10_035_000),
    ("6.987654321G", 6_987_654_321),
    # values finer than a nano round away from zero to the next nano
    ("3.001n", Fraction(4, 10**9)),
    ("0.0000000001", Fraction(1, 10**9)),
    ("0.00000012345", Fraction(124, 10**9)),
    ("0.000000000001Ki", Fraction(2, 10**9)),
    # binary SI saturates at 2^63 - 1
    ("9Ei", INT64_MAX),
    ("9223372036854775807Ki", INT64_MAX),
    # lenient forms the API accepts
    (".001", Fraction(1, 1000)),
    ("1.", 1),
    ("1.G", 10**9),
    (".", 0),
    ("-1.5", Fraction(-3, 2)),
]


@pytest.mark.parametrize(("text", "value"), PARSES, ids=[text for text, _ in PARSES])
def test_parse_quantity_matches_the_api(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


INVALID = [
    "",
    "1.1.M",
    "1+1.0M",
    "0.1mi",
    "0.1am",
    "aoeu",
    ".5i",
    "1i",
    "-3.01i",
    "-3.01e-",
    " 1",
    "1 ",
    "1K",
    "1kb",
    "1e",
]


@pytest.mark.parametrize("text", INVALID, ids=[repr(text) for text in INVALID])
def test_malformed_quantity_is_a_typed_error_naming_the_field(text: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(text, field="spec.containers[0].resources.requests.cpu")
    assert raised.value.field == "spec.containers[0].resources.requests.cpu"
    assert "spec.containers[0].resources.requests.cpu" in str(raised.value)


@pytest.mark.parametrize(
    ("resource", "text", "amount"),
    [
        ("cpu", "100m", 100),
        ("cpu", "0.5", 500),
        ("cpu", "2", 2000),
        ("cpu", "0.0001", 1),  # rounds up to a whole millicore, as MilliValue does
        ("cpu", "1500u", 2),
        ("memory", "1.5Gi", 1610612736),
        ("memory", "100m", 1),  # a tenth of a byte still needs a byte
        ("memory", "129e6", 129_000_000),
        ("nvidia.com/gpu", "8", 8),
        ("pods", "110", 110),
        ("memory", "9Ei", MAX_AMOUNT),
    ],
)
def test_base_units_round_up(resource: str, text: str, amount: int) -> None:
    assert to_base_units(resource, parse_quantity(text)) == amount


def container(
    name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: object
) -> dict[str, object]:
    resources: dict[str, object] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources, **extra}


def pod(
    containers: list[dict[str, object]], init: list[dict[str, object]] | None = None, **spec: object
) -> dict[str, object]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": containers, "initContainers": init or [], **spec},
    }


REQUEST_CASES = [
    pytest.param(
        pod([container("a", {"cpu": "500m", "memory": "1Gi"}), container("b", {"cpu": "250m"})]),
        {"cpu": 750, "memory": GI, "pods": 1},
        id="containers add up",
    ),
    pytest.param(
        pod([container("a", {"cpu": "1"})], [container("init", {"cpu": "2", "memory": "64Mi"})]),
        {"cpu": 2000, "memory": 64 * MI, "pods": 1},
        id="an init container bigger than the containers sets the floor",
    ),
    pytest.param(
        pod(
            [container("main", {"cpu": "1"})],
            [
                container("sidecar", {"cpu": "500m"}, restartPolicy="Always"),
                container("setup", {"cpu": "1"}),
            ],
        ),
        # sidecar runs beside the main container (1 + 0.5) and beside the later init (0.5 + 1)
        {"cpu": 1500, "pods": 1},
        id="a sidecar adds to the containers and to later init containers",
    ),
    pytest.param(
        pod(
            [container("main", {"cpu": "100m"})],
            [
                container("sidecar", {"cpu": "500m"}, restartPolicy="Always"),
                container("setup", {"cpu": "2"}),
            ],
        ),
        {"cpu": 2500, "pods": 1},
        id="an init container after a sidecar peaks with it",
    ),
    pytest.param(
        pod([container("a", limits={"cpu": "2", "nvidia.com/gpu": "8"})]),
        {"cpu": 2000, "nvidia.com/gpu": 8, "pods": 1},
        id="requests default to limits",
    ),
    pytest.param(
        pod([container("a", {"cpu": "1"})], overhead={"cpu": "250m", "memory": "120Mi"}),
        {"cpu": 1250, "memory": 120 * MI, "pods": 1},
        id="runtime class overhead is added",
    ),
    pytest.param(
        pod([container("a", {"cpu": "1", "nvidia.com/gpu": "1"})], resources={"requests": {"cpu": "4"}}),
        {"cpu": 4000, "nvidia.com/gpu": 1, "pods": 1},
        id="pod-level requests replace the cpu sum only",
    ),
    pytest.param(pod([container("a")]), {"pods": 1}, id="a best-effort pod still takes a pod slot"),
]


@pytest.mark.parametrize(("manifest", "expected"), REQUEST_CASES)
def test_effective_request(manifest: dict[str, object], expected: dict[str, int]) -> None:
    assert pod_requests(manifest) == expected


def test_negative_request_names_the_container_field() -> None:
    with pytest.raises(
        SpecError, match=r"spec\.initContainers\[0\]\.resources\.requests\.memory.*greater than or equal to 0"
    ):
        pod_requests(pod([container("a")], [container("i", {"memory": "-1Gi"})]))


def test_malformed_request_names_the_container_field() -> None:
    with pytest.raises(QuantityError) as raised:
        pod_requests(pod([container("a"), container("b", {"cpu": "two"})]))
    assert raised.value.field == "spec.containers[1].resources.requests.cpu"
    assert "'two'" in str(raised.value)
