"""W3C trace context for tasks, with the standard library only.

A task carries the ``traceparent`` (and optional ``tracestate``) it was
submitted in; the span a worker opens for an attempt should be its child.
The SDK has no dependencies, so it starts no spans: these helpers read and
write traceparent strings so that a program can continue the trace with
whatever tracer it uses (with the OpenTelemetry SDK:
``TraceContextTextMapPropagator().extract({"traceparent": task.traceparent})``)
or hand a child context on (``child_traceparent``)::

    client.submit("emails", spec, traceparent=norn.tracing.new_traceparent())

    def handler(task):
        tp = norn.tracing.child_traceparent(task.traceparent)   # or None
        requests.post(url, headers={"traceparent": tp} if tp else {})
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple, Optional

__all__ = ["TraceParent", "parse_traceparent", "format_traceparent", "new_traceparent", "child_traceparent"]

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


class TraceParent(NamedTuple):
    """The fields of a traceparent: ``trace_id`` (32 hex), ``parent_id``
    (16 hex: the span to parent on), ``flags`` (``sampled`` is bit 0)."""

    trace_id: str
    parent_id: str
    flags: int = 1

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def __str__(self) -> str:
        return format_traceparent(self)


def parse_traceparent(value: Optional[str]) -> Optional[TraceParent]:
    """Reads a W3C traceparent, or returns None when ``value`` is None,
    empty or not one (wrong layout, uppercase, all-zero ids, version ff,
    extra fields on version 00) — the rules the server applies."""
    if not value or len(value) > 256:
        return None
    m = _TRACEPARENT.match(value)
    if m is None:
        return None
    version, trace_id, parent_id, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    return TraceParent(trace_id, parent_id, int(flags, 16))


def format_traceparent(tp: TraceParent) -> str:
    """Writes ``tp`` as a version 00 traceparent."""
    return f"00-{tp.trace_id}-{tp.parent_id}-{tp.flags & 0xFF:02x}"


def _random_hex(n: int) -> str:
    while True:
        h = os.urandom(n).hex()
        if h != "0" * (2 * n):
            return h


def new_traceparent(sampled: bool = True) -> str:
    """Starts a new trace: a traceparent with random trace and span ids."""
    return format_traceparent(TraceParent(_random_hex(16), _random_hex(8), 1 if sampled else 0))


def child_traceparent(parent: Optional[str]) -> Optional[str]:
    """A traceparent for a new span whose parent is ``parent``: the same
    trace and flags, a new random span id. None when ``parent`` is not a
    traceparent (the task is in no trace)."""
    p = parse_traceparent(parent)
    if p is None:
        return None
    return format_traceparent(TraceParent(p.trace_id, _random_hex(8), p.flags))
