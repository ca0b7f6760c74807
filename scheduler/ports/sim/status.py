"""API errors as the Kubernetes API reports them: an HTTP code, a reason and a ``Status`` object."""

from __future__ import annotations

from typing import Any

REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class ApiError(Exception):
    """A refused request. ``reason`` follows metav1.StatusReason (``AlreadyExists`` is a 409 too)."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        name: str = "",
        group: str = "",
        kind: str = "",
        retry_after: int | None = None,
        causes: list[dict[str, str]] | None = None,
    ) -> None:
        self.code = code
        self.reason = reason or REASONS.get(code, "Unknown")
        self.message = message
        self.details = {"name": name, "group": group, "kind": kind}
        self.retry_after = retry_after
        self.causes = causes or []
        super().__init__(f"{code} {self.reason}: {message}")

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {key: value for key, value in self.details.items() if value}
        if self.causes:
            details["causes"] = self.causes
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": details,
            "code": self.code,
        }


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(404, f'{resource} "{name}" not found', name=name, group=group, kind=resource)


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409, f'{resource} "{name}" already exists', reason="AlreadyExists", name=name, group=group, kind=resource
    )


def conflict(resource: str, name: str, why: str, group: str = "") -> ApiError:
    message = f'Operation cannot be fulfilled on {resource} "{name}": {why}'
    return ApiError(409, message, name=name, group=group, kind=resource)
