"""What a gang asks for: the gang tree of docs/architecture.md, and the pod shapes at its leaves.

A :class:`GangRequest` is either a *leaf* holding member pods (satisfied when ``min_pods`` of them are
placed together) or an *inner node* holding sub-gangs (satisfied when ``min_children`` of them are,
and, when ``min_pods`` is set on it, when at least that many pods are placed in the whole subtree, as
Volcano's ``minMember`` above ``minTaskMember`` asks). Any node may require or prefer that its
members share one domain of a node label.

Members are grouped by :class:`PodShape`: pods with equal requests and node constraints are
interchangeable for placement, so fit is computed once per shape, never once per pod.

A leaf may also ask for ``placeholders``: room for that many members that do not exist yet, shaped
like ``placeholder_shape``. They are a count, never an object each: a gang that says it will have a
billion members costs the same to place as one that says two.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from topology.nodes import Taint

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
NODE_NAME_FIELD: Final = "metadata.name"


class ConstraintError(ValueError):
    """A node selector, affinity or toleration that the API server would reject."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """`v1.Toleration.ToleratesTaint`: an empty key with Exists matches every taint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSelectorRequirement:
    """One `matchExpressions` (label) or `matchFields` (``metadata.name``) requirement."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.operator not in OPERATORS:
            raise ConstraintError(
                f"operator {self.operator!r} of key {self.key!r} is not one of {', '.join(OPERATORS)}"
            )
        if self.operator in ("In", "NotIn") and not self.values:
            raise ConstraintError(f"operator {self.operator} of key {self.key!r} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ConstraintError(f"operator {self.operator} of key {self.key!r} takes no values")
        if self.operator in ("Gt", "Lt"):
            if len(self.values) != 1:
                raise ConstraintError(f"operator {self.operator} of key {self.key!r} needs exactly one value")
            try:
                int(self.values[0])
            except ValueError:
                raise ConstraintError(
                    f"operator {self.operator} of key {self.key!r} needs an integer value, got {self.values[0]!r}"
                ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSelectorTerm:
    """Requirements that must all hold (AND). A term with no requirement matches no node, as upstream."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    def __post_init__(self) -> None:
        for requirement in self.match_fields:
            if requirement.key != NODE_NAME_FIELD:
                raise ConstraintError(f"matchFields supports only {NODE_NAME_FIELD!r}, got {requirement.key!r}")
            if requirement.operator not in ("In", "NotIn"):
                raise ConstraintError(
                    f"matchFields on {NODE_NAME_FIELD} supports In and NotIn, got {requirement.operator}"
                )


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConstraints:
    """The hard node constraints of a pod that placement honours."""

    node_name: str | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    #: Required node affinity: the node must match at least one term (OR). ``None`` means no affinity.
    affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PodShape:
    """Requests (base units, sorted by name, including ``pods``) and node constraints of a pod."""

    requests: tuple[tuple[str, int], ...] = (("pods", 1),)
    constraints: NodeConstraints = field(default_factory=NodeConstraints)

    def __post_init__(self) -> None:
        if any(amount < 0 for _, amount in self.requests):
            raise ValueError(f"requests must not be negative: {dict(self.requests)}")

    @staticmethod
    def of(requests: Mapping[str, int] | None = None, constraints: NodeConstraints | None = None) -> PodShape:
        """Build a shape from a request mapping; ``pods: 1`` is implied as for every pod."""
        merged = {"pods": 1, **(requests or {})}
        return PodShape(
            requests=tuple(sorted((name, amount) for name, amount in merged.items() if amount or name == "pods")),
            constraints=constraints or NodeConstraints(),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """One pod of a gang. ``node`` is set when it already runs (or is assumed) somewhere: it then
    counts towards its minimum and pins the domains of required constraints above it."""

    key: str
    shape: PodShape
    node: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GangRequest:
    """A node of the gang tree. Leaves have ``pods``; inner nodes have ``children``."""

    key: str
    pods: tuple[Member, ...] = ()
    children: tuple[GangRequest, ...] = ()
    min_pods: int = 0
    min_children: int = 0
    required: str | None = None
    preferred: str | None = None
    #: Room to place for members not created yet (a count of ``placeholder_shape`` pods), leaves only.
    placeholders: int = 0
    placeholder_shape: PodShape | None = None

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a gang request needs a key")
        if self.pods and self.children:
            raise ValueError(f"{self.key}: a gang node holds either pods or children, not both")
        if self.placeholders < 0 or (self.placeholders and (self.children or self.placeholder_shape is None)):
            raise ValueError(f"{self.key}: placeholders need a leaf and a placeholder_shape")
        if self.min_pods < 0 or self.min_children < 0:
            raise ValueError(f"{self.key}: minimums must not be negative")
        if self.min_children > len(self.children):
            raise ValueError(f"{self.key}: min_children {self.min_children} exceeds its {len(self.children)} children")
        if len({child.key for child in self.children}) != len(self.children):
            raise ValueError(f"{self.key}: children keys must be distinct")
        if self.required is not None and not self.required:
            raise ValueError(f"{self.key}: required topology key must be a non-empty label key")
        if self.preferred is not None and not self.preferred:
            raise ValueError(f"{self.key}: preferred topology key must be a non-empty label key")

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @staticmethod
    def leaf(
        key: str,
        pods: tuple[Member, ...] | list[Member],
        *,
        min_pods: int | None = None,
        required: str | None = None,
        preferred: str | None = None,
    ) -> GangRequest:
        """A leaf gang; by default all of its pods are its minimum (a plain all-or-nothing gang)."""
        pods = tuple(pods)
        return GangRequest(
            key=key,
            pods=pods,
            min_pods=len(pods) if min_pods is None else min_pods,
            required=required,
            preferred=preferred,
        )

    @staticmethod
    def group(
        key: str,
        children: tuple[GangRequest, ...] | list[GangRequest],
        *,
        min_children: int | None = None,
        min_pods: int = 0,
        required: str | None = None,
        preferred: str | None = None,
    ) -> GangRequest:
        """An inner gang; by default every child is required."""
        children = tuple(children)
        return GangRequest(
            key=key,
            children=children,
            min_children=len(children) if min_children is None else min_children,
            min_pods=min_pods,
            required=required,
            preferred=preferred,
        )

    def walk(self) -> Iterator[GangRequest]:
        """This node and every node below it, depth first, parents before children."""
        yield self
        for child in self.children:
            yield from child.walk()

    def members(self) -> Iterator[Member]:
        for node in self.walk():
            yield from node.pods

    def bound(
        self, nodes: Mapping[str, str], shapes: dict[tuple[int, str], PodShape] | None = None
    ) -> tuple[GangRequest, int]:
        """This tree with the members named in ``nodes`` on those nodes (their ``spec.nodeName`` set, as a
        bind sets it: node and node constraint alike), and how many of them it holds. ``shapes``: each shape
        pinned to a node so far, by the shape's identity: a gang's members mostly share one shape and land
        several on a node, and pinning a shape (a dataclass replaced) costs microseconds."""
        shapes = {} if shapes is None else shapes
        if self.is_leaf:
            pods, found = [], 0
            for member in self.pods:
                node = nodes.get(member.key)
                if node is None:
                    pods.append(member)
                    continue
                found += 1
                shape = shapes.get((id(member.shape), node))
                if shape is None:
                    constraints = replace(member.shape.constraints, node_name=node)
                    shape = PodShape(requests=member.shape.requests, constraints=constraints)
                    shapes[(id(member.shape), node)] = shape
                pods.append(Member(key=member.key, shape=shape, node=node))
            return (replace(self, pods=tuple(pods)), found) if found else (self, 0)
        children, found = [], 0
        for child in self.children:
            updated, here = child.bound(nodes, shapes)
            children.append(updated)
            found += here
        return (replace(self, children=tuple(children)), found) if found else (self, 0)

    def minimum_pods(self) -> int:
        """The fewest pods that can satisfy every minimum of this node (its cheapest children)."""
        if self.is_leaf:
            return self.min_pods
        cheapest = sorted(child.minimum_pods() for child in self.children)[: self.min_children]
        return max(self.min_pods, sum(cheapest))

    def satisfied_by(self, placed: Container[str]) -> bool:
        """Whether the members in ``placed`` (pod keys) meet every minimum of this node."""
        count = sum(1 for member in self.members() if member.key in placed)
        if self.is_leaf:
            return count >= self.min_pods
        children = sum(1 for child in self.children if child.satisfied_by(placed))
        return children >= self.min_children and count >= self.min_pods
