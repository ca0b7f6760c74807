"""Errors at the cluster port, the same whatever adapter is behind it.

Each adapter translates its own failures once, at its boundary, into these (raised ``from`` the
original), so the scheduler decides what to do from the kind of failure alone:

- :class:`NotFound` (404): the object is gone; :class:`Conflict` (409): someone else changed it, or
  the pod is already bound; :class:`Expired` (410): the watch version is too old, list again;
- :class:`Throttled` (429), :class:`Unavailable` (5xx, timeouts, connection failures): transient,
  retry with backoff; :class:`Forbidden` (401/403): configuration, not transient;
- :class:`Invalid` (400/422): the request itself is wrong (a bug, or a bad object).
"""

from __future__ import annotations


class PortError(Exception):
    """A request the cluster did not carry out. ``code`` is the HTTP status when there was one."""

    code: int = 0
    transient: bool = False

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class NotFound(PortError):
    code = 404


class Conflict(PortError):
    code = 409


class Expired(PortError):
    code = 410


class Invalid(PortError):
    code = 422


class Forbidden(PortError):
    code = 403


class Throttled(PortError):
    code = 429
    transient = True

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(PortError):
    code = 503
    transient = True


def from_status(code: int, message: str, *, retry_after: float | None = None) -> PortError:
    """The port error for an HTTP status code and the message of its Status body."""
    if code == 404:
        return NotFound(message)
    if code == 409:
        return Conflict(message)
    if code == 410:
        return Expired(message)
    if code in (401, 403):
        return Forbidden(message, code=code)
    if code == 429:
        return Throttled(message, retry_after=retry_after if retry_after is not None else 1.0)
    if code in (400, 415, 422):
        return Invalid(message, code=code)
    return Unavailable(message, code=code)
