"""The one error type for API objects the engine cannot use, naming the field at fault."""

from __future__ import annotations


class SpecError(ValueError):
    """A field of a Node or Pod that the Kubernetes API would reject, or that placement cannot honour.

    ``field`` is the JSON path (``spec.containers[0].resources.requests.cpu``), ``value`` what was
    found there and ``problem`` what would be valid, so the message alone tells a person what to fix.
    """

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{field}: {shown}: {problem}")
