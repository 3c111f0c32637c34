"""Typed errors of the Norn API.

Every error the server answers with has the same body,
``{"error": {"code": ..., "message": ..., "field": ...}}``; it becomes an
instance of the class registered for its code, so callers catch exactly the
case they handle (``except norn.LeaseLost``) and read ``field`` to learn
which input was refused.
"""

from __future__ import annotations

import json
from typing import Dict, Optional, Type

__all__ = [
    "NornError",
    "InvalidArgument",
    "Unauthenticated",
    "PermissionDenied",
    "NotFound",
    "Conflict",
    "LeaseLost",
    "Cancelled",
    "Duplicate",
    "TooLarge",
    "Unavailable",
    "Internal",
    "Shutdown",
]


class NornError(Exception):
    """An error answered by a Norn server (or a failure to reach one).

    ``code`` is the server's machine-readable code (``"not_found"``, ...),
    ``message`` its human text, ``field`` the input it refused
    (``"tasks[3].priority"``) or ``None``, ``status`` the HTTP status or
    ``None`` when no response came.
    """

    code = "internal"

    def __init__(
        self,
        message: str = "",
        *,
        code: Optional[str] = None,
        field: Optional[str] = None,
        status: Optional[int] = None,
    ) -> None:
        if code is not None:
            self.code = code
        self.message = message or self.code
        self.field = field or None
        self.status = status
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.field:
            return f"{self.field}: {self.message}"
        return self.message

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
            f"field={self.field!r}, status={self.status!r})"
        )

    def __reduce__(self):  # keeps the keyword-only fields through pickling
        return (_rebuild, (type(self), self.message, self.code, self.field, self.status))


def _rebuild(cls, message, code, field, status):
    return cls(message, code=code, field=field, status=status)


class InvalidArgument(NornError):
    """Bad input (400); ``field`` names it."""

    code = "invalid_argument"


class Unauthenticated(NornError):
    """Missing or unknown bearer token (401)."""

    code = "unauthenticated"


class PermissionDenied(NornError):
    """The token's role or queue scope does not allow the call (403)."""

    code = "permission_denied"


class NotFound(NornError):
    """No such task (404)."""

    code = "not_found"


class Conflict(NornError):
    """Wrong state, an ``if_version`` mismatch or a log ``seq`` mismatch (409)."""

    code = "conflict"


class LeaseLost(NornError):
    """The worker's lease is not the current one: stop working on the task (409)."""

    code = "lease_lost"


class Cancelled(NornError):
    """The task was cancelled: stop working on it (409)."""

    code = "cancelled"


class Duplicate(NornError):
    """A task with this id exists."""

    code = "duplicate"


class TooLarge(NornError):
    """A size limit was exceeded (413); ``field`` names what was too large."""

    code = "too_large"


class Unavailable(NornError):
    """The server or its store cannot be reached right now (503, or no
    connection at all); repeating the call later may succeed."""

    code = "unavailable"


class InsufficientStorage(NornError):
    """The server's disk is full (507): the write changed nothing. Writes
    resume by themselves once space is freed; repeating the call later may
    succeed."""

    code = "insufficient_storage"


class Internal(NornError):
    """A bug in the server (500), or a response the client cannot read."""

    code = "internal"


class Shutdown(Exception):
    """Raised inside a handler (by ``task.check()`` and friends) when the
    worker is shutting down and the grace period is over: the task has been
    yielded back to its queue and another worker will run it."""


_BY_CODE: Dict[str, Type[NornError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        Conflict,
        LeaseLost,
        Cancelled,
        Duplicate,
        TooLarge,
        Unavailable,
        InsufficientStorage,
        Internal,
    )
}

# Used when a response has no error body the client can read (a proxy's
# error page, a server of another kind).
_BY_STATUS = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    405: "invalid_argument",
    409: "conflict",
    413: "too_large",
    429: "unavailable",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
    507: "insufficient_storage",
}


def error_for(code: str, message: str = "", field: Optional[str] = None, status: Optional[int] = None) -> NornError:
    """The exception for an error code; unknown codes give a plain NornError
    that still carries the code."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return NornError(message, code=code or "internal", field=field, status=status)
    return cls(message, field=field, status=status)


def from_wire(obj, status: Optional[int] = None) -> Optional[NornError]:
    """The exception for a decoded ``{"code", "message", "field"}`` object,
    or None when obj is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("code"), str) or not obj["code"]:
        return None
    message = obj.get("message")
    field = obj.get("field")
    return error_for(
        obj["code"],
        message if isinstance(message, str) else "",
        field if isinstance(field, str) else None,
        status,
    )


def from_response(status: int, body: bytes) -> NornError:
    """The exception for a non-2xx response."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict):
        err = from_wire(doc.get("error"), status)
        if err is not None:
            return err
    text = body.decode("utf-8", "replace").strip()
    if len(text) > 200:
        text = text[:200] + "…"
    code = _BY_STATUS.get(status, "internal")
    return error_for(code, f"HTTP {status}: {text}" if text else f"HTTP {status}", status=status)
