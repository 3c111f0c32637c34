"""W3C trace context for tasks, and spans for the worker's attempts, with
the standard library only.

A task carries the ``traceparent`` (and optional ``tracestate``) it was
submitted in. A worker given a ``tracer`` runs every attempt in a span whose
parent is that traceparent (see :class:`norn.Worker`); ``task.span`` is the
span and ``task.span_traceparent`` its traceparent, to hand on. Two kinds of
tracer work:

- an OpenTelemetry ``Tracer`` (``opentelemetry.trace.get_tracer(...)``):
  the attempt's span is a real OpenTelemetry span, current while the
  handler runs (see :class:`norn.Worker` for exactly what is called);
- a :class:`Recorder`, which needs nothing installed: it gives every
  attempt a :class:`Span` with a new W3C span id in the task's trace, and
  hands ended spans to a callback (log them, count them, export them).

The helpers read and write traceparent strings for programs that trace
some other way::

    client.submit("emails", spec, traceparent=norn.tracing.new_traceparent())

    def handler(task):
        tp = norn.tracing.child_traceparent(task.traceparent)   # or None
        requests.post(url, headers={"traceparent": tp} if tp else {})
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import threading
import time
from typing import Any, Callable, ContextManager, Deque, Dict, List, Mapping, NamedTuple, Optional

__all__ = [
    "TraceParent",
    "parse_traceparent",
    "format_traceparent",
    "new_traceparent",
    "child_traceparent",
    "Recorder",
    "Span",
]

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


# ---- spans ----------------------------------------------------------------

_log = logging.getLogger("norn.tracing")


class Span:
    """The span of one attempt, made by a :class:`Recorder`.

    ``trace_id`` and ``span_id`` (hex) identify it, ``parent_id`` is the
    span id of the task's traceparent (None: the task had none, the span
    starts a trace), ``flags`` and ``tracestate`` come from the task.
    ``attributes`` hold what the worker recorded (the names the Go
    worker's OpenTelemetry spans use, ``norn.task.outcome`` among them),
    ``status`` is ``"unset"`` or ``"error"`` (``status_description`` says
    why), ``exceptions`` what the handler raised; ``start_time`` and
    ``end_time`` are ``time.time()`` values, ``end_time`` None until it
    ended.
    """

    kind = "consumer"

    def __init__(self, recorder: "Recorder", name: str, parent: Optional[TraceParent], tracestate: Optional[str],
                 attributes: Mapping[str, Any]) -> None:
        self._recorder = recorder
        self._lock = threading.Lock()
        self.name = name
        if parent is not None:
            self.trace_id, self.parent_id, self.flags = parent.trace_id, parent.parent_id, parent.flags
        else:
            self.trace_id, self.parent_id, self.flags = _random_hex(16), None, 1
        self.span_id = _random_hex(8)
        self.tracestate = tracestate
        self.attributes: Dict[str, Any] = dict(attributes)
        self.status = "unset"
        self.status_description = ""
        self.exceptions: List[BaseException] = []
        self.start_time = time.time()
        self.end_time: Optional[float] = None

    def __repr__(self) -> str:
        return f"<norn.tracing.Span {self.name!r} {self.traceparent} parent={self.parent_id} status={self.status}>"

    @property
    def traceparent(self) -> str:
        """This span's traceparent: the same trace, its own span id."""
        return format_traceparent(TraceParent(self.trace_id, self.span_id, self.flags))

    @property
    def ended(self) -> bool:
        return self.end_time is not None

    def set_attribute(self, key: str, value: Any) -> None:
        with self._lock:
            self.attributes[key] = value

    def record_exception(self, exc: BaseException) -> None:
        with self._lock:
            self.exceptions.append(exc)

    def set_error(self, description: str) -> None:
        with self._lock:
            self.status, self.status_description = "error", description

    def end(self) -> None:
        """Ends the span (once; later calls do nothing) and hands it to the
        recorder."""
        with self._lock:
            if self.end_time is not None:
                return
            self.end_time = time.time()
        self._recorder._ended(self)


class Recorder:
    """A tracer for :class:`norn.Worker` that needs no OpenTelemetry: every
    attempt gets a :class:`Span`, a child of the task's traceparent with a
    new random span id (a new trace when the task has none), so the handler
    has a traceparent of its own to hand on (``task.span_traceparent``).

    ``on_end(span)`` is called with every ended span, in the handler's
    thread after its outcome was reported (an exception it raises is logged
    and ignored); :attr:`spans` keeps the last ``keep`` ended spans.
    """

    def __init__(self, on_end: Optional[Callable[[Span], Any]] = None, keep: int = 1000) -> None:
        if on_end is not None and not callable(on_end):
            raise TypeError("on_end must be callable")
        if not isinstance(keep, int) or keep < 0:
            raise ValueError("keep must be a non-negative integer")
        self._on_end = on_end
        self._lock = threading.Lock()
        self._spans: Deque[Span] = collections.deque(maxlen=keep)

    def start_task_span(self, name: str, *, traceparent: Optional[str], tracestate: Optional[str],
                        attributes: Mapping[str, Any]) -> Span:
        """Starts the span of one attempt (the worker calls it; so may you)."""
        parent = parse_traceparent(traceparent)
        return Span(self, name, parent, tracestate if parent is not None else None, attributes)

    @property
    def spans(self) -> List[Span]:
        """The last ended spans, oldest first."""
        with self._lock:
            return list(self._spans)

    def _ended(self, span: Span) -> None:
        with self._lock:
            self._spans.append(span)
        if self._on_end is not None:
            try:
                self._on_end(span)
            except Exception:
                _log.exception("norn.tracing.Recorder: on_end failed for %r", span)


# ---- what the worker calls ---------------------------------------------------
#
# The worker speaks to one small interface, _Attempt; the two kinds of tracer
# are adapted to it here, so the worker knows nothing of OpenTelemetry.


class _Attempt:
    """The span of one attempt, as the worker sees it: both kinds of span
    take attributes, exceptions and ``end()`` alike and differ in how they
    are made current, give their traceparent and take an error status."""

    def __init__(self, span: Any) -> None:
        self.span = span

    @property
    def traceparent(self) -> Optional[str]:
        raise NotImplementedError

    def activate(self) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def _set_error(self, description: str) -> None:
        raise NotImplementedError

    def outcome(self, op: str, code: str, description: str, exc: Optional[BaseException]) -> None:
        self.span.set_attribute("norn.task.outcome", op)
        if op in ("fail", "abort"):
            self.span.set_attribute("error.type", code)
            if exc is not None:
                self.span.record_exception(exc)
            self._set_error(description)

    def end(self) -> None:
        self.span.end()


class _RecorderAttempt(_Attempt):
    @property
    def traceparent(self) -> Optional[str]:
        tp = getattr(self.span, "traceparent", None)
        return tp if parse_traceparent(tp) is not None else None

    def _set_error(self, description: str) -> None:
        self.span.set_error(description)


class _RecorderTracer:
    """A Recorder, or any object with its ``start_task_span``."""

    def __init__(self, tracer: Any) -> None:
        self._t = tracer

    def start(self, name: str, traceparent: Optional[str], tracestate: Optional[str], attributes: Dict[str, Any]) -> _Attempt:
        return _RecorderAttempt(self._t.start_task_span(name, traceparent=traceparent, tracestate=tracestate, attributes=attributes))


class _OtelAttempt(_Attempt):
    def __init__(self, api: "_OtelAPI", tracer: Any, name: str, traceparent: Optional[str], tracestate: Optional[str],
                 attributes: Dict[str, Any]) -> None:
        self._api = api
        carrier: Dict[str, str] = {}
        if traceparent:
            carrier["traceparent"] = traceparent
            if tracestate:
                carrier["tracestate"] = tracestate
        # An empty Context, not the thread's current one: the parent is the
        # task's traceparent or nothing.
        parent = api.propagator.extract(carrier, context=api.Context())
        super().__init__(tracer.start_span(name, context=parent, kind=api.SpanKind.CONSUMER, attributes=attributes))
        self._ctx = api.trace.set_span_in_context(self.span, parent)

    @property
    def traceparent(self) -> Optional[str]:
        carrier: Dict[str, str] = {}
        self._api.propagator.inject(carrier, context=self._ctx)
        return carrier.get("traceparent")

    @contextlib.contextmanager
    def activate(self) -> Any:
        token = self._api.context.attach(self._ctx)
        try:
            yield
        finally:
            self._api.context.detach(token)

    def _set_error(self, description: str) -> None:
        self.span.set_status(self._api.Status(self._api.StatusCode.ERROR, description))


class _OtelAPI:
    """The parts of the opentelemetry-api package the worker uses, imported
    only when a worker is given an OpenTelemetry tracer."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.context import Context
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.context, self.trace, self.Context = context, trace, Context
        self.SpanKind, self.Status, self.StatusCode = SpanKind, Status, StatusCode
        self.propagator = TraceContextTextMapPropagator()


class _OtelTracer:
    def __init__(self, tracer: Any) -> None:
        self._t = tracer
        self._api = _OtelAPI()

    def start(self, name: str, traceparent: Optional[str], tracestate: Optional[str], attributes: Dict[str, Any]) -> _Attempt:
        return _OtelAttempt(self._api, self._t, name, traceparent, tracestate, attributes)


def _adapt(tracer: Any) -> Any:
    """The worker's view of ``tracer``; raises ValueError or ImportError
    when it is none of the kinds the worker knows."""
    if callable(getattr(tracer, "start_task_span", None)):
        return _RecorderTracer(tracer)
    if callable(getattr(tracer, "start_span", None)):
        try:
            return _OtelTracer(tracer)
        except ImportError as e:
            raise ImportError(f"a tracer with start_span is taken for an OpenTelemetry Tracer, but opentelemetry-api "
                              f"is not importable ({e}); use norn.tracing.Recorder() without it") from e
    raise ValueError("must be a norn.tracing.Recorder (or have its start_task_span) or an OpenTelemetry Tracer "
                     f"(with start_span), got {type(tracer).__name__}")
