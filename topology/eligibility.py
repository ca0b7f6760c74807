"""Which nodes a pod shape may use at all, and why the others are ruled out.

The static filters run in kube-scheduler's default order, and a node is charged to the first one
that rejects it, with kube-scheduler's own wording, so that our explanations read like the
``FailedScheduling`` events operators already know:

1. NodeUnschedulable  "node(s) were unschedulable" (unless the pod tolerates
   ``node.kubernetes.io/unschedulable:NoSchedule``)
2. NodeName           "node(s) didn't match the requested node name"
3. TaintToleration    "node(s) had untolerated taint {key: value}" (NoSchedule and NoExecute only;
   a node that is not Ready carries ``node.kubernetes.io/not-ready:NoSchedule``, as the node
   lifecycle controller would put on it)
4. NodeAffinity       "node(s) didn't match Pod's node affinity/selector"

Results depend only on node labels and taints, so they are cached per snapshot generation and per
set of constraints: every pod of a shape, and every shape with the same constraints, shares one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from topology.domains import BoolArray, IntArray, LabelColumn
from topology.nodes import UNSCHEDULABLE_TAINT
from topology.request import NodeConstraints, NodeSelectorRequirement, NodeSelectorTerm
from topology.snapshot import Snapshot

UNSCHEDULABLE = "node(s) were unschedulable"
NODE_NAME = "node(s) didn't match the requested node name"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"

_INT64 = re.compile(r"^[+-]?[0-9]+$")


@dataclass(frozen=True, slots=True)
class Eligibility:
    """Static filter outcome of one set of node constraints.

    mask : ndarray of shape (n_nodes,), dtype=bool
        Nodes that pass every static filter.
    reason_ids : ndarray of shape (n_nodes,), dtype=int32
        0 for nodes that pass, otherwise an index into ``reasons`` (the first filter that failed).
    blocked : ndarray of shape (n_blocked,), dtype=int64
        Indices of the nodes that fail, for zeroing fit arrays cheaply.
    """

    mask: BoolArray
    reason_ids: npt.NDArray[np.int32]
    reasons: tuple[str, ...]
    blocked: IntArray


def eligibility(snapshot: Snapshot, constraints: NodeConstraints) -> Eligibility:
    """The cached eligibility of ``constraints`` on this snapshot generation."""
    return snapshot.cached(("eligibility", constraints), lambda: _compute(snapshot, constraints))


def _compute(snapshot: Snapshot, constraints: NodeConstraints) -> Eligibility:
    n_nodes = snapshot.n_nodes
    reason_ids = np.zeros(n_nodes, dtype=np.int32)
    reasons = [""]

    def charge(failed: BoolArray, reason: str) -> None:
        failed = failed & (reason_ids == 0)
        if failed.any():
            reason_ids[failed] = len(reasons)
            reasons.append(reason)

    if not any(toleration.tolerates(UNSCHEDULABLE_TAINT) for toleration in constraints.tolerations):
        charge(snapshot.unschedulable, UNSCHEDULABLE)

    if constraints.node_name is not None:
        wrong_name = np.ones(n_nodes, dtype=np.bool_)
        row = snapshot.index_of(constraints.node_name)
        if row is not None:
            wrong_name[row] = False
        charge(wrong_name, NODE_NAME)

    table = snapshot.taints
    if table.taints and table.by_node.shape[1]:
        # One flag per distinct taint, plus a trailing False that the -1 padding indexes.
        untolerated = np.array(
            [not any(t.tolerates(taint) for t in constraints.tolerations) for taint in table.taints] + [False],
            dtype=np.bool_,
        )
        hits = untolerated[table.by_node]
        tainted = hits.any(axis=1)
        first = table.by_node[np.arange(n_nodes), hits.argmax(axis=1)]
        for taint_id in np.unique(first[tainted]):
            taint = table.taints[int(taint_id)]
            charge(tainted & (first == taint_id), f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}")

    charge(~affinity_mask(snapshot, constraints), AFFINITY)

    mask = reason_ids == 0
    return Eligibility(
        mask=mask,
        reason_ids=reason_ids,
        reasons=tuple(reasons),
        blocked=np.flatnonzero(~mask).astype(np.int64),
    )


def affinity_mask(snapshot: Snapshot, constraints: NodeConstraints) -> BoolArray:
    """Nodes matching ``nodeSelector`` and the required node affinity (terms ORed, requirements ANDed)."""
    mask = np.ones(snapshot.n_nodes, dtype=np.bool_)
    for key, value in constraints.node_selector:
        column = snapshot.label(key)
        value_id = column.index.get(value)
        if value_id is None:
            return np.zeros(snapshot.n_nodes, dtype=np.bool_)
        mask &= column.ids == value_id
    if constraints.affinity is not None:
        matched = np.zeros(snapshot.n_nodes, dtype=np.bool_)
        for term in constraints.affinity:
            matched |= _term_mask(snapshot, term)
        mask &= matched
    return mask


def _term_mask(snapshot: Snapshot, term: NodeSelectorTerm) -> BoolArray:
    if not term.match_expressions and not term.match_fields:
        return np.zeros(snapshot.n_nodes, dtype=np.bool_)  # an empty term selects nothing
    mask = np.ones(snapshot.n_nodes, dtype=np.bool_)
    for requirement in term.match_expressions:
        mask &= _label_mask(snapshot.label(requirement.key), requirement, snapshot)
    for requirement in term.match_fields:
        by_name = np.zeros(snapshot.n_nodes, dtype=np.bool_)
        for name in requirement.values:
            row = snapshot.index_of(name)
            if row is not None:
                by_name[row] = True
        mask &= by_name if requirement.operator == "In" else ~by_name
    return mask


def _label_mask(column: LabelColumn, requirement: NodeSelectorRequirement, snapshot: Snapshot) -> BoolArray:
    operator = requirement.operator
    if operator in ("Exists", "DoesNotExist"):
        exists = operator == "Exists"
        return column.select(np.full(len(column.values), exists, dtype=np.bool_), missing=not exists)
    if operator in ("In", "NotIn"):
        listed = np.zeros(len(column.values), dtype=np.bool_)
        for value in requirement.values:
            value_id = column.index.get(value)
            if value_id is not None:
                listed[value_id] = True
        # NotIn, like DoesNotExist, matches nodes that lack the label (labels.Selector semantics).
        return column.select(listed, missing=False) if operator == "In" else column.select(~listed, missing=True)
    parsed, numeric = _numeric_values(snapshot, column)
    bound = int(requirement.values[0])
    accepted = parsed & ((numeric > bound) if operator == "Gt" else (numeric < bound))
    return column.select(accepted, missing=False)


def _numeric_values(snapshot: Snapshot, column: LabelColumn) -> tuple[BoolArray, IntArray]:
    """Each distinct label value as int64 (Go's strconv.ParseInt), with a flag for those that parse."""

    def build() -> tuple[BoolArray, IntArray]:
        parsed = np.zeros(len(column.values), dtype=np.bool_)
        numeric = np.zeros(len(column.values), dtype=np.int64)
        for i, value in enumerate(column.values):
            if _INT64.match(value) and -(2**63) <= int(value) < 2**63:
                parsed[i] = True
                numeric[i] = int(value)
        return parsed, numeric

    return snapshot.cached(("numeric-label", column.key), build)
