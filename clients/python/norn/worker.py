"""A worker that claims tasks and runs them with Python functions.

One thread long-polls claims into free slots, one thread keeps every running
task's lease alive with batched heartbeats, and every task runs its handler
in a thread of its own. What a handler does decides the outcome:

=========================  ==========================================
handler                    task becomes
=========================  ==========================================
returns a value            completed, the value (JSON) is its result
raises ``norn.Abort``      aborted, never retried
raises ``norn.Snooze``     scheduled again after the given delay (or
                           until a signal arrives), the attempt not
                           counted
raises ``norn.Fail``       failed with the given code: retried per the
                           task's retry policy, else aborted
raises anything else       failed (code ``handler_error``), likewise
calls ``await_children``   blocked until its children ended, then
                           claimed again with their outcomes in
                           ``dependency_results``; the attempt not
                           counted and what the handler returns ignored
=========================  ==========================================

A worker given a ``chunk_handler`` instead of ``handlers`` runs the tasks
of each claim together, for work that is cheaper in bulk (one insert for
many rows). Its claims are batch claims: they answer once ``chunk_min``
tasks are ready, or once the one ready longest has waited
``chunk_linger``; with ``chunk_group_by`` (``"concurrency_key"`` or
``"label:NAME"``) every chunk holds tasks sharing that value. The chunk handler gets a list of :class:`ActiveTask` and
returns one outcome per task, in order: a value completes that task (the
value is its result), an exception *instance* (``norn.Abort(...)``,
``norn.Fail(...)``, ``norn.Snooze(...)``, any other) is that task's outcome
as if a handler had raised it. Returning None completes every task; raising
gives every task that outcome. Each task keeps its own lease, heartbeats,
``cancelled`` and outcome.

Python cannot stop a thread from outside, so cancellation is cooperative:
when the task is cancelled, its lease is lost or a shutdown's grace period
ends, ``task.cancelled`` turns True, ``task.check()`` and ``task.sleep()``
raise (``norn.Cancelled``, ``norn.LeaseLost``, ``norn.Shutdown``) and so do
``task.progress()`` and ``task.log()``. Nothing a handler returns after that
is reported.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from . import errors, tracing
from ._wire import format_duration, format_time, parse_duration
from .client import Client, _Abort
from .errors import Cancelled, InvalidArgument, LeaseLost, NornError, NotFound, Shutdown
from .types import LogEntry, Record, Task

__all__ = ["Worker", "ActiveTask", "Abort", "Fail", "Snooze", "Handler", "ChunkHandler", "Middleware"]

Handler = Callable[["ActiveTask"], Any]
# A chunk handler runs the tasks of one claim together and returns one
# outcome per task (a result, or an exception instance), or None.
ChunkHandler = Callable[[List["ActiveTask"]], Optional[Sequence[Any]]]
# Middleware wraps every handler call: mw(task, next) calls next(task) (or
# not) and decides the outcome by what it returns or raises.
Middleware = Callable[["ActiveTask", Handler], Any]

DEFAULT_LEASE = 10.0  # seconds: a task's lease when neither it nor its queue sets one
DEFAULT_ERROR_CODE = "handler_error"
MAX_CLAIM = 1000
MAX_WAIT = 300.0
# chunk_group_by: the values the server takes for a claim's group_by.
_GROUP_BY = re.compile(r"concurrency_key|label:[^:,]{1,128}")
# How long run() waits for handlers that ignore a cancellation after their
# tasks were yielded; their outcomes are discarded anyway.
ABANDON_AFTER = 5.0
# Recorded error descriptions stay well inside the server's 64 KiB limit.
_MAX_DESCRIPTION_CHARS = 8000


class Abort(Exception):
    """Raise it from a handler to abort the task for good (no retry).
    ``code`` is recorded with the error (default ``handler_error``),
    ``details`` (a JSON object) as its args."""

    def __init__(self, message: str = "", *, code: Optional[str] = None, details: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


class Fail(Exception):
    """Raise it from a handler to fail the attempt with a code of your own
    (``norn.Fail("rate limited", code="rate_limited")``): the task is
    retried per its policy, as for any other exception. ``retry_in``
    (seconds, timedelta or a duration string; a 429's Retry-After) asks for
    that wait instead of the policy's backoff, capped by its max."""

    def __init__(self, message: str = "", *, code: Optional[str] = None, details: Optional[Mapping[str, Any]] = None,
                 retry_in: Optional[Any] = None) -> None:
        if retry_in is not None:
            format_duration(retry_in, "retry_in")  # refuses a bad value here, in the handler
        super().__init__(message)
        self.code = code
        self.details = details
        self.retry_in = retry_in


class Snooze(Exception):
    """Raise it from a handler to put the task back until ``delay`` seconds
    (a number, timedelta or duration string) from now, or until ``run_at``,
    without spending an attempt: ``raise norn.Snooze(30)``.

    With ``until_signal`` the task waits for a signal of that name instead
    (sent with :meth:`Client.send_signal`), at most ``timeout`` (default
    24h): it is claimed again once the signal arrives (at once if one came
    before) or the timeout passes, and ``task.signal_wait.received`` tells
    which: ``raise norn.Snooze(until_signal="approval", timeout="24h")``.

    With ``scope="key"`` (and ``delay`` or ``run_at``) it also holds back the
    task's concurrency key: the key's rate-limit bucket is emptied, so no
    task of the key is claimed, by any worker, before the snooze ends, while
    other keys' tasks go on. It is back-pressure from whatever serves the
    key (a tenant's API answering 429): ``raise norn.Snooze(30, scope="key")``.
    The key needs a rate limit (the queue's ``key_rate_limit`` or its own
    ``rate_limit``); when the server refuses the scope (no rate limit, or a
    task without a key), the worker snoozes the task alone and logs a
    warning."""

    def __init__(self, delay: Optional[Any] = None, *, run_at: Optional[Any] = None,
                 until_signal: Optional[str] = None, timeout: Optional[Any] = None,
                 scope: Optional[str] = None) -> None:
        if scope is not None and scope != "key":
            raise InvalidArgument(f'must be "key" or None, not {scope!r}', field="scope")
        if scope is not None and until_signal is not None:
            raise InvalidArgument("holds a key back until a time: give delay or run_at, not until_signal", field="scope")
        if until_signal is not None and (delay is not None or run_at is not None):
            raise InvalidArgument("give until_signal, or delay or run_at, not both", field="until_signal")
        if until_signal is None and (delay is None) == (run_at is None):
            raise InvalidArgument("give exactly one of delay, run_at and until_signal", field="delay")
        if timeout is not None and until_signal is None:
            raise InvalidArgument("only with until_signal", field="timeout")
        if delay is not None:
            format_duration(delay, "delay")  # refuses a bad value here, in the handler
        elif run_at is not None:
            format_time(run_at, "run_at")
        else:
            if not isinstance(until_signal, str) or not until_signal:
                raise InvalidArgument("must be a non-empty string", field="until_signal")
            if timeout is not None:
                format_duration(timeout, "timeout")
        if until_signal is not None:
            msg = f"waits for signal {until_signal!r}" + (f" at most {timeout}" if timeout is not None else "")
        else:
            msg = f"snoozed until {run_at}" if run_at is not None else f"snoozed for {delay}"
            if scope is not None:
                msg += " with its key"
        super().__init__(msg)
        self.delay = delay
        self.run_at = run_at
        self.until_signal = until_signal
        self.timeout = timeout
        self.scope = scope


# Where a claimed task is in its life on this worker.
_RUNNING = "running"  # the handler runs, heartbeats keep the lease
_FINISHING = "finishing"  # the handler returned; its outcome is being reported
_GONE = "gone"  # cancelled or lease lost: nothing more is sent
_YIELDED = "yielded"  # given back at shutdown: nothing more is sent
_AWAITED = "awaited"  # the handler awaited children, which ended the lease: nothing more is sent


class _Run:
    """The worker's bookkeeping for one claimed task. Fields after ``state``
    are guarded by the worker's lock."""

    def __init__(self, record: Task, worker_id: str, lease_len: float, interval: float, sent: float) -> None:
        self.record = record
        self.id: str = record["id"]
        self.worker: str = record.get("owner") or worker_id
        self.lease: int = record["lease"]
        self.lease_len = lease_len
        self.interval = interval
        self.stopped = threading.Event()
        self.reason: Optional[BaseException] = None
        self.state = _RUNNING
        self.last_ok = sent  # monotonic time the last successful claim/heartbeat was sent
        self.next_beat = sent + interval
        self.inflight = False
        self.progress: Optional[float] = None
        self.log_lock = threading.Lock()
        self.next_seq = 0
        self.prev_log: Optional[List[LogEntry]] = None
        self.attempt: Optional[tracing._Attempt] = None  # the attempt's span, with a tracer


class ActiveTask:
    """The handler's view of one claimed task.

    ``id``, ``queue``, ``spec``, ``labels``, ``priority``, ``attempts`` (1 on
    the first claim), ``lease`` (the fencing token: it grows on every claim
    and is never reused), ``worker``, ``depends_on``,
    ``dependency_results`` (the outcomes of the dependencies and awaited
    children that ended: records with ``id``, ``status``, ``result``,
    ``error``), ``signals`` (the signals received before the claim:
    records with ``seq``, ``name``, ``data``, ``time``), ``signal_wait``
    (the last wait for a signal: ``name``, ``until``, ``received``; None
    if the task never waited), ``batch`` (the batch the task joined, or
    None) and ``traceparent``
    (the W3C trace context the task was submitted with, or None) read the
    claimed task; ``record`` is all of it. The methods talk to the server
    under the task's lease and are safe to call from the handler's threads;
    do not call them after the handler returned.
    """

    def __init__(self, worker: "Worker", run: _Run) -> None:
        self._w = worker
        self._r = run
        rec = run.record
        self.record: Task = rec
        self.id: str = run.id
        self.queue: str = rec.get("queue")
        self.spec: Any = rec.get("spec")
        self.labels: Dict[str, str] = dict(rec.get("labels") or {})
        self.priority: int = rec.get("priority") or 0
        self.attempts: int = rec.get("attempts") or 0
        self.lease: int = run.lease
        self.worker: str = run.worker
        self.depends_on: List[str] = list(rec.get("depends_on") or ())
        self.batch: Optional[str] = rec.get("batch")
        # Outcomes of the ended dependencies and awaited children, in
        # depends_on order (records with id, status, result, error).
        self.dependency_results: List[Record] = rec.dependency_results
        # The signals received before this claim, and the last wait for one
        # (None if the task never waited; received False: it timed out).
        self.signals: List[Record] = rec.signals
        self.signal_wait: Optional[Record] = rec.signal_wait

    def __repr__(self) -> str:
        return f"<norn.ActiveTask {self.id} queue={self.queue!r} lease={self.lease}>"

    @property
    def traceparent(self) -> Optional[str]:
        """The W3C ``traceparent`` the task carries, to parent the handler's
        span on, or None."""
        tp = self.record.get("traceparent")
        if tp is None:
            trace = self.record.get("trace")
            if isinstance(trace, dict):
                tp = trace.get("traceparent")
        return tp if isinstance(tp, str) and tp else None

    @property
    def tracestate(self) -> Optional[str]:
        """The W3C ``tracestate`` that travels with ``traceparent``, or None."""
        ts = self.record.get("tracestate")
        return ts if isinstance(ts, str) and ts else None

    @property
    def span(self) -> Any:
        """The attempt's span when the worker has a tracer (a
        ``norn.tracing.Span`` with a Recorder, an OpenTelemetry span with an
        OpenTelemetry tracer), else None."""
        a = self._r.attempt
        return a.span if a is not None else None

    @property
    def span_traceparent(self) -> Optional[str]:
        """The traceparent to hand on: the attempt's span's when the worker
        has a tracer, else the task's own. Pass it (with ``tracestate``) to
        the tasks the handler submits and the requests it makes, so they
        join the trace under this attempt."""
        a = self._r.attempt
        tp = None
        if a is not None:
            try:
                tp = a.traceparent
            except Exception:
                self._w.log.exception("norn task %s: the tracer's span has no traceparent", self.id)
        return tp or self.traceparent

    # ---- cancellation -------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once the handler should stop: the task was cancelled, its
        lease was lost, or a shutdown's grace period is over."""
        return self._r.stopped.is_set()

    @property
    def reason(self) -> Optional[BaseException]:
        """Why the handler should stop (a ``norn.Cancelled``,
        ``norn.LeaseLost`` or ``norn.Shutdown``), or None."""
        return self._r.reason

    def check(self) -> None:
        """Raises the reason to stop, if there is one."""
        if self._r.stopped.is_set():
            raise _fresh(self._r.reason)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits up to ``timeout`` seconds for a reason to stop; True if
        there is one."""
        return self._r.stopped.wait(timeout)

    def sleep(self, seconds: float) -> None:
        """Sleeps, but raises the reason to stop as soon as there is one."""
        if self._r.stopped.wait(seconds):
            raise _fresh(self._r.reason)

    # ---- talking to the server ------------------------------------------

    def progress(self, p: float) -> None:
        """Records progress ``p`` (0..1) right away with a heartbeat, which
        also extends the lease. Prefer :meth:`set_progress` for frequent
        updates. Raises ``norn.Cancelled``/``norn.LeaseLost`` when the task
        is no longer this worker's (and the handler is told to stop)."""
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise InvalidArgument(f"must be a number between 0 and 1, got {p!r}", field="progress")
        r, w = self._r, self._w
        self.check()
        sent = time.monotonic()
        try:
            w.client.heartbeat(r.id, r.worker, r.lease, progress=float(p), extend=w._lease)
        except NornError as e:
            raise w._check(r, e)
        w._beaten(r, sent)

    def set_progress(self, p: float) -> None:
        """Records progress ``p`` with the next automatic heartbeat: never
        blocks, costs no call of its own. Values outside 0..1 are clamped."""
        if isinstance(p, bool) or not isinstance(p, (int, float)) or p != p:
            return
        with self._w._lock:
            self._r.progress = min(max(float(p), 0.0), 1.0)

    def log(self, data: Any) -> LogEntry:
        """Appends ``data`` (JSON) to the task's update log, which the next
        claimant reads with :meth:`previous_log` to resume from a
        checkpoint. Each append names the sequence number it expects, so a
        retried append never lands twice."""
        r, w = self._r, self._w
        self.check()
        with r.log_lock:
            if r.next_seq == 0:
                # Lease 1 is the first claim ever, so the log is empty; later
                # claimants learn where the log ends by reading it once.
                if r.lease == 1:
                    r.next_seq = 1
                else:
                    self._load_log()
            delay = 0.05
            attempt = 0
            while True:
                seq = r.next_seq
                try:
                    entry = w.client.append_log(r.id, r.worker, r.lease, data, seq=seq)
                    r.next_seq = entry["seq"] + 1
                    return entry
                except errors.Conflict as e:
                    # Our number is behind: an earlier append whose reply was
                    # lost landed. If it is this very entry, that is success.
                    try:
                        entries = w.client.read_log(r.id, after=seq - 1)
                    except NornError as e2:
                        raise w._check(r, e2)
                    if entries:
                        r.next_seq = entries[-1]["seq"] + 1
                        first = entries[0]
                        if first["seq"] == seq and first["lease"] == r.lease and first.get("data") == data:
                            return first
                    if attempt >= 3:
                        raise w._check(r, e)
                except (errors.Unavailable, errors.Internal) as e:
                    if attempt >= 3:
                        raise w._check(r, e)
                    if r.stopped.wait(delay):
                        raise _fresh(r.reason)
                    delay *= 2
                except NornError as e:
                    raise w._check(r, e)
                attempt += 1

    def await_children(self, *children: Mapping[str, Any], on_child_failure: Optional[str] = None) -> List[Task]:
        """Submits ``children`` (dicts with ``queue``, ``spec`` and the
        options of :meth:`Client.submit`) and makes this task wait for
        them, atomically; then return from the handler: the attempt ends
        without counting and nothing more is reported for it (what the
        handler returns is ignored). Once every child ended the task is
        claimed again, its ``dependency_results`` holding the children's
        outcomes. A failed child aborts the task (``dependency_failed``)
        unless ``on_child_failure`` is ``"continue"``. Returns the
        children as submitted, in order. A later attempt may await again
        (a fan-out in stages)::

            if not task.dependency_results:
                return task.await_children({"queue": "resize", "spec": small}, {"queue": "resize", "spec": large})
            # claimed again: every child ended
            return [r.result for r in task.dependency_results]

        Raises ``norn.InvalidArgument`` (nothing changed, the handler goes
        on), ``norn.LeaseLost``/``norn.Cancelled`` (the task is no longer
        this worker's) or a transport error; the handler's outcome is then
        reported as usual."""
        r, w = self._r, self._w
        with w._lock:
            if r.state != _RUNNING:
                if r.reason is not None:
                    raise _fresh(r.reason)
                raise RuntimeError(f"await: task {r.id!r} is no longer running in this worker (awaited already?)")
            # Heartbeats go on while the call is in flight; the handler's
            # return cannot be reported meanwhile.
            r.state = _FINISHING
        try:
            _, out = w.client.await_children(r.id, r.worker, r.lease, children, on_child_failure=on_child_failure)
        except BaseException as e:
            with w._lock:
                if r.state == _FINISHING:
                    r.state = _RUNNING
            if isinstance(e, NornError):
                raise w._check(r, e)
            raise
        with w._lock:
            if r.state == _FINISHING:
                r.state = _AWAITED
        w.log.info("norn task %s: awaits %d children", r.id, len(out))
        return out

    def new_signals(self, after: int = 0) -> List[Record]:
        """The signals the task received after sequence number ``after``
        (0: all), in order, read from the server now: a long handler
        waiting on a person or another system can poll for them
        (``signals`` holds those received before the claim)::

            seen = task.signals[-1].seq if task.signals else 0
            while not task.cancelled:
                for s in task.new_signals(seen):
                    seen = s.seq
                    ...
                task.sleep(5)"""
        r, w = self._r, self._w
        self.check()
        try:
            return w.client.list_signals(r.id, after=after)
        except NornError as e:
            raise w._check(r, e)

    def previous_log(self) -> List[LogEntry]:
        """The log entries written under earlier claims of this task, oldest
        first, read once and cached."""
        with self._r.log_lock:
            return self._load_log()

    def _load_log(self) -> List[LogEntry]:
        r, w = self._r, self._w
        if r.prev_log is not None:
            return r.prev_log
        page = 1000
        prev: List[LogEntry] = []
        after = 0
        while True:
            try:
                entries = w.client.read_log(r.id, after=after, limit=page)
            except NornError as e:
                raise w._check(r, e)
            for e in entries:
                if e["lease"] < r.lease:
                    prev.append(e)
                after = e["seq"]
            if len(entries) < page:
                break
        r.prev_log = prev
        if r.next_seq <= after:
            r.next_seq = after + 1
        return prev


def _fresh(reason: Optional[BaseException]) -> BaseException:
    """A new exception like reason, so raising it twice does not chain
    tracebacks onto one object."""
    if reason is None:
        return Shutdown("worker is shutting down")
    if isinstance(reason, NornError):
        return type(reason)(reason.message, field=reason.field, status=reason.status)
    return type(reason)(*reason.args)


class Worker:
    """Claims tasks from the queues of ``handlers`` and runs them.

    ``handlers`` maps a queue to a function taking a :class:`ActiveTask`;
    queues are claimed in the mapping's order unless ``queues`` says
    otherwise. Options (seconds for times):

    - ``concurrency``: most tasks running (and leased) at once; default the
      number of CPUs.
    - ``lease``: lease length asked for on claim and heartbeat; default each
      task's own timeout (its queue's default, 10 s unless set).
    - ``heartbeat_interval``: default a third of the lease, so two
      heartbeats can be lost before it expires; also bounds how late a
      handler learns of a cancellation.
    - ``claim_batch`` (10): most tasks per claim, never more than free slots.
    - ``wait`` (10): long-poll time of one claim; 0 disables long-polling.
    - ``poll_interval`` (1): least time between two empty claims.
    - ``shutdown_grace`` (10): how long running handlers may finish after a
      shutdown starts before their tasks are yielded back.
    - ``name``: shown to operators; default ``host:pid``.
    - ``capacity``: asked before every claim; while it returns False
      nothing is claimed (e.g. memory or load above a threshold). Re-asked
      every ``poll_interval`` and whenever a slot frees.
    - ``middleware``: callables ``mw(task, next)`` around every handler
      call, the first one outermost: each sees the task before and the
      outcome after, and decides the outcome by what it returns or raises
      (logging, metrics, turning a library's errors into ``norn.Abort``);
      with a ``tracer`` they run inside the attempt's span.
    - ``chunk_handler``, instead of ``handlers``: a function taking the
      list of tasks of one claim (see the module's doc); ``queues`` is then
      required and ``middleware`` not allowed.
    - ``chunk_min`` (0): the least number of tasks a chunk waits for: every
      claim is a batch claim answering once that many are ready (0 or 1: as
      soon as one is). At most ``chunk_max``.
    - ``chunk_linger`` (0): how long a ready task waits for ``chunk_min`` to
      gather before the chunk is whatever is ready (0: until ``chunk_min``
      are ready). Needs a ``chunk_min`` of 2 or more.
    - ``chunk_max``: most tasks in one chunk; default ``concurrency`` (at
      most 1000). Every task of a chunk takes a slot, and the worker claims
      only when ``chunk_min`` slots are free.
    - ``chunk_group_by`` (None): ``"concurrency_key"`` or ``"label:NAME"``:
      every task of a chunk shares that value, and ``chunk_min`` and
      ``chunk_linger`` count per value (a group claim).
    - ``tracer``: runs every attempt in a span whose parent is the task's
      traceparent (a new trace when it has none), named ``process
      <queue>``, ended once the outcome is reported or known not to be
      (cancelled, lease lost, yielded); ``task.span`` is the span and
      ``task.span_traceparent`` its traceparent. Either

      * a :class:`norn.tracing.Recorder` (standard library only), or any
        object with its ``start_task_span(name, *, traceparent, tracestate,
        attributes)`` returning a span with ``traceparent``,
        ``set_attribute(key, value)``, ``record_exception(exc)``,
        ``set_error(description)`` and ``end()``; or
      * an OpenTelemetry ``Tracer`` (anything else with ``start_span``;
        ``opentelemetry-api`` must be importable). The worker calls
        ``TraceContextTextMapPropagator().extract({"traceparent": …,
        "tracestate": …}, context=Context())``, then
        ``tracer.start_span(name, context=parent, kind=SpanKind.CONSUMER,
        attributes=…)``, ``context.attach(trace.set_span_in_context(span,
        parent))`` around middleware and handler (detached after),
        ``span.set_attribute``, ``span.record_exception``,
        ``span.set_status(Status(StatusCode.ERROR, …))`` and ``span.end()``.

      The attributes are the Go worker's: ``messaging.system`` (``norn``),
      ``messaging.operation.type`` (``process``),
      ``messaging.destination.name`` (queue), ``messaging.message.id``
      (task id), ``norn.worker``, ``norn.task.lease``,
      ``norn.task.attempt``, and once the outcome is known
      ``norn.task.outcome`` (``complete``, ``fail``, ``abort``,
      ``snooze``); a failure or abort also sets ``error.type`` (the error
      code), records the exception and sets the status to error. A tracer
      that raises costs the span, never the task.
    """

    def __init__(
        self,
        client: Client,
        handlers: Optional[Mapping[str, Handler]] = None,
        *,
        concurrency: Optional[int] = None,
        queues: Optional[Sequence[str]] = None,
        weights: Optional[Mapping[str, int]] = None,
        lease: Optional[float] = None,
        heartbeat_interval: Optional[float] = None,
        claim_batch: int = 10,
        wait: float = 10.0,
        poll_interval: float = 1.0,
        shutdown_grace: float = 10.0,
        name: Optional[str] = None,
        logger: Optional[logging.Logger] = None,
        middleware: Sequence[Middleware] = (),
        capacity: Optional[Callable[[], bool]] = None,
        tracer: Any = None,
        chunk_handler: Optional[ChunkHandler] = None,
        chunk_min: int = 0,
        chunk_linger: float = 0.0,
        chunk_max: Optional[int] = None,
        chunk_group_by: Optional[str] = None,
    ) -> None:
        if client is None:
            raise InvalidArgument("a norn.Client is required", field="client")
        if chunk_handler is not None:
            if handlers:
                raise InvalidArgument("a worker runs either handlers or a chunk_handler, not both", field="chunk_handler")
            if not callable(chunk_handler):
                raise InvalidArgument("must be a callable taking a list of tasks", field="chunk_handler")
            handlers = {}
        else:
            if not isinstance(handlers, Mapping) or not handlers:
                raise InvalidArgument("map at least one queue to a handler", field="handlers")
            for field, given in (("chunk_min", chunk_min), ("chunk_linger", chunk_linger), ("chunk_max", chunk_max),
                                 ("chunk_group_by", chunk_group_by)):
                if given:
                    raise InvalidArgument("needs a chunk_handler", field=field)
        for q, fn in handlers.items():
            if not isinstance(q, str) or not q:
                raise InvalidArgument(f"queue names are non-empty strings, got {q!r}", field="handlers")
            if not callable(fn):
                raise InvalidArgument(f"the handler of queue {q!r} is not callable", field=f"handlers[{q!r}]")
        queues = list(queues) if queues is not None else list(handlers)
        if not queues:
            raise InvalidArgument("at least one queue is required", field="queues")
        for i, q in enumerate(queues):
            if not isinstance(q, str) or not q:
                raise InvalidArgument(f"queue names are non-empty strings, got {q!r}", field=f"queues[{i}]")
            if chunk_handler is None and q not in handlers:
                raise InvalidArgument(f"no handler for queue {q!r}", field=f"queues[{i}]")
        weights = dict(weights or {})
        for q, w in weights.items():
            if q not in queues:
                raise InvalidArgument(f"{q!r} is not a queue the worker claims from", field=f"weights[{q!r}]")
            if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= 1000:
                raise InvalidArgument("must be an integer between 1 and 1000", field=f"weights[{q!r}]")
        self.weights = weights
        if concurrency is None:
            concurrency = os.cpu_count() or 1
        if not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidArgument("must be a positive integer", field="concurrency")
        if chunk_handler is not None:
            if chunk_max is None:
                chunk_max = min(concurrency, MAX_CLAIM)
            if not isinstance(chunk_max, int) or isinstance(chunk_max, bool) or not 1 <= chunk_max <= MAX_CLAIM:
                raise InvalidArgument(f"must be an integer between 1 and {MAX_CLAIM}", field="chunk_max")
            if chunk_max > concurrency:
                raise InvalidArgument(f"must be at most concurrency ({concurrency}), got {chunk_max}", field="chunk_max")
            if not isinstance(chunk_min, int) or isinstance(chunk_min, bool) or chunk_min < 0:
                raise InvalidArgument("must be a non-negative integer", field="chunk_min")
            if chunk_min > concurrency:
                raise InvalidArgument(f"must be at most concurrency ({concurrency}), got {chunk_min}", field="chunk_min")
            if chunk_min > chunk_max:
                raise InvalidArgument(f"must be at most chunk_max ({chunk_max}), got {chunk_min}", field="chunk_min")
            if not chunk_linger >= 0:
                raise InvalidArgument("must not be negative", field="chunk_linger")
            if chunk_linger > 0 and chunk_min < 2:
                raise InvalidArgument("needs a chunk_min of 2 or more", field="chunk_linger")
            if chunk_group_by is not None and not _GROUP_BY.fullmatch(str(chunk_group_by)):
                raise InvalidArgument('must be "concurrency_key" or "label:" followed by a label name', field="chunk_group_by")
            if middleware:
                raise InvalidArgument("middleware wraps single-task handlers; a chunk_handler takes none", field="middleware")
        if lease is not None and not lease >= 0.001:
            raise InvalidArgument("must be at least 0.001 (1ms)", field="lease")
        if heartbeat_interval is not None:
            if not heartbeat_interval > 0:
                raise InvalidArgument("must be positive", field="heartbeat_interval")
            if lease is not None and heartbeat_interval >= lease:
                raise InvalidArgument(f"must be shorter than lease ({lease})", field="heartbeat_interval")
        if not isinstance(claim_batch, int) or not 1 <= claim_batch <= MAX_CLAIM:
            raise InvalidArgument(f"must be between 1 and {MAX_CLAIM}", field="claim_batch")
        if not 0 <= wait <= MAX_WAIT:
            raise InvalidArgument(f"must be between 0 and {MAX_WAIT:g}", field="wait")
        if not poll_interval >= 0:
            raise InvalidArgument("must not be negative", field="poll_interval")
        if not shutdown_grace >= 0:
            raise InvalidArgument("must not be negative", field="shutdown_grace")
        if capacity is not None and not callable(capacity):
            raise InvalidArgument("must be a callable returning a bool", field="capacity")
        for i, mw in enumerate(middleware):
            if not callable(mw):
                raise InvalidArgument("middleware are callables mw(task, next)", field=f"middleware[{i}]")
        adapted = None
        if tracer is not None:
            try:
                adapted = tracing._adapt(tracer)
            except (ValueError, ImportError) as e:
                raise InvalidArgument(str(e), field="tracer") from e
        self.client = client
        self.tracer = tracer
        self._tracer = adapted
        self.handlers = dict(handlers)
        self.queues = queues
        self.concurrency = concurrency
        self._lease = lease
        self._lease_wire = format_duration(lease, "lease") if lease is not None else None
        self.heartbeat_interval = heartbeat_interval
        self.claim_batch = claim_batch
        self.wait = wait
        self.poll_interval = poll_interval
        self.shutdown_grace = shutdown_grace
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.log = logger or logging.getLogger("norn.worker")
        self.middleware = list(middleware)
        self.capacity = capacity
        self.chunk_handler = chunk_handler
        self.chunk_min = chunk_min
        self.chunk_linger = chunk_linger
        self.chunk_max = chunk_max
        self.chunk_group_by = chunk_group_by or None

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # notified on every change of runs or state
        self._runs: Dict[_Run, threading.Thread] = {}
        self._id: Optional[str] = None
        self._started = False
        self._stopping = threading.Event()
        self._hb_stop = False
        self._claim_abort: Optional[_Abort] = None
        self._done = threading.Event()

    @property
    def id(self) -> Optional[str]:
        """The worker id the server assigned (``worker-<n>``), None before
        :meth:`run` registered."""
        return self._id

    @property
    def running(self) -> int:
        """How many tasks this worker holds right now."""
        with self._lock:
            return len(self._runs)

    # ---- lifecycle -------------------------------------------------------

    def run(self, *, handle_signals: bool = True) -> None:
        """Registers, then claims and runs tasks until :meth:`stop` (or, with
        ``handle_signals`` in the main thread, SIGTERM or SIGINT), and shuts
        down gracefully: stops claiming, lets running handlers finish within
        ``shutdown_grace``, then tells the rest to stop and yields their
        tasks so another worker takes them at once. Raises the error that
        made the worker unable to work (an invalid queue, a refused token)."""
        with self._lock:
            if self._started:
                raise RuntimeError("norn.Worker.run called twice")
            self._started = True
        restore = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                restore.append((sig, signal.signal(sig, self._on_signal)))
        try:
            self._run()
        finally:
            for sig, old in restore:
                signal.signal(sig, old)
            self._done.set()

    def _on_signal(self, signum: int, frame: Any) -> None:
        # A signal handler runs between two bytecodes of the main thread,
        # which may hold the worker's lock (or logging's): stopping and
        # logging happen in a thread of their own.
        def stop() -> None:
            self.log.info("norn worker %s: signal %d, shutting down", self._id, signum)
            self.stop()

        threading.Thread(target=stop, name="norn-stop", daemon=True).start()

    def stop(self, timeout: Optional[float] = 0) -> bool:
        """Starts a graceful shutdown (safe from any thread, and before
        :meth:`run`: it then returns at once). Waits up to ``timeout``
        seconds (None: for ever) for run() to return; True if it did."""
        with self._lock:
            self._stopping.set()
            abort = self._claim_abort
            self._cond.notify_all()
        if abort is not None:
            abort.abort()
        if timeout == 0:
            return self._done.is_set()
        return self._done.wait(timeout)

    def _run(self) -> None:
        if not self._register():
            return
        hb = threading.Thread(target=self._heartbeats, name="norn-heartbeats", daemon=True)
        hb.start()
        err: Optional[BaseException] = None
        try:
            self._claim_loop()
        except NornError as e:
            err = e
        finally:
            self.stop()
            self._drain()
            with self._lock:
                self._hb_stop = True
                self._cond.notify_all()
            hb.join()
        if err is not None:
            raise err

    def _register(self) -> bool:
        delay = 0.1
        while not self._stopping.is_set():
            try:
                wid = self.client.register_worker(self.name, self.queues)
            except (errors.Unavailable, errors.Internal) as e:
                self.log.warning("norn worker: registration failed, retrying in %.1fs: %s", delay, e)
                if self._stopping.wait(delay):
                    return False
                delay = min(delay * 2, 5.0)
                continue
            self._id = wid
            self.log.info("norn worker %s registered: queues %s, concurrency %d", wid, self.queues, self.concurrency)
            return True
        return False

    def _claim_loop(self) -> None:
        backoff = 0.1
        # A chunk worker claims only once a whole chunk_min fits: a batch
        # claim's min may not exceed its n.
        need = max(self.chunk_min, 1) if self.chunk_handler is not None else 1
        while not self._stopping.is_set():
            with self._lock:
                while self.concurrency - len(self._runs) < need and not self._stopping.is_set():
                    self._cond.wait()
                if self._stopping.is_set():
                    return
                free = self.concurrency - len(self._runs)
            if self.capacity is not None and not self._has_capacity():
                with self._lock:
                    # Ask again after poll_interval, or sooner when a slot frees.
                    self._cond.wait(self.poll_interval)
                continue
            with self._lock:
                if self._stopping.is_set():
                    return
                abort = self._claim_abort = _Abort()
            sent = time.monotonic()
            n, batch = min(free, self.claim_batch), {}
            if self.chunk_handler is not None:
                n = min(free, self.chunk_max)
                if self.chunk_group_by:
                    batch["group_by"] = self.chunk_group_by
                if self.chunk_min >= 2:
                    batch["min"] = self.chunk_min
                    if self.chunk_linger > 0:
                        batch["linger"] = self.chunk_linger
            try:
                tasks = self.client.claim(
                    self._id,
                    self.queues,
                    n=n,
                    timeout=self._lease_wire,
                    wait=self.wait if self.wait > 0 else None,
                    weights=self.weights or None,
                    _abort=abort,
                    **batch,
                )
            except (errors.InvalidArgument, errors.Unauthenticated, errors.PermissionDenied):
                raise
            except NornError as e:
                if self._stopping.is_set():
                    return
                self.log.warning("norn worker %s: claim failed, retrying in %.1fs: %s", self._id, backoff, e)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            finally:
                with self._lock:
                    self._claim_abort = None
            backoff = 0.1
            if self.chunk_handler is not None and tasks:
                self._start_chunk(tasks, sent)
            else:
                for rec in tasks:
                    self._start(rec, sent)
            if not tasks:
                self._stopping.wait(self.poll_interval - (time.monotonic() - sent))

    def _has_capacity(self) -> bool:
        try:
            return bool(self.capacity())
        except Exception:
            self.log.exception("norn worker %s: capacity callback failed; claiming nothing for now", self._id)
            return False

    def _lease_len(self, rec: Task) -> float:
        if self._lease is not None:
            return self._lease
        t = rec.get("timeout")
        if t:
            try:
                secs = parse_duration(t)
                if secs > 0:
                    return secs
            except ValueError:
                pass
        return DEFAULT_LEASE

    def _new_run(self, rec: Task, sent: float) -> _Run:
        lease_len = self._lease_len(rec)
        interval = self.heartbeat_interval
        if interval is None or interval >= lease_len:
            interval = lease_len / 3
        return _Run(rec, self._id, lease_len, interval, sent)

    def _start(self, rec: Task, sent: float) -> None:
        run = self._new_run(rec, sent)
        task = ActiveTask(self, run)
        t = threading.Thread(target=self._serve, args=(run, task), name=f"norn-task-{run.id}", daemon=True)
        with self._lock:
            self._runs[run] = t
            self._cond.notify_all()
        t.start()

    # ---- running a task ------------------------------------------------------

    def _serve(self, run: _Run, task: ActiveTask) -> None:
        try:
            self._call(run, task)
        finally:
            a = run.attempt
            if a is not None:
                # Every attempt's span ends: after its outcome was reported,
                # or once it is known there is none (cancelled, lost, yielded).
                try:
                    a.end()
                except Exception:
                    self.log.exception("norn task %s: the tracer's span failed to end", run.id)
            with self._lock:
                self._runs.pop(run, None)
                self._cond.notify_all()

    def _trace_start(self, run: _Run, task: ActiveTask) -> None:
        """Starts the attempt's span, a child of the task's traceparent,
        with the attributes the Go worker sets."""
        if self._tracer is None:
            return
        attrs = {
            "messaging.system": "norn",
            "messaging.operation.type": "process",
            "messaging.destination.name": task.queue,
            "messaging.message.id": task.id,
            "norn.worker": run.worker,
            "norn.task.lease": run.lease,
            "norn.task.attempt": task.attempts,
        }
        try:
            run.attempt = self._tracer.start(f"process {task.queue}", task.traceparent, task.tracestate, attrs)
        except Exception:
            self.log.exception("norn task %s: the tracer failed to start a span; running untraced", run.id)

    def _call(self, run: _Run, task: ActiveTask) -> None:
        call = self.handlers.get(task.queue) or _no_handler
        for mw in reversed(self.middleware):
            call = _wrap(mw, call)
        self._trace_start(run, task)
        active: Any = contextlib.nullcontext()
        if run.attempt is not None:
            try:
                active = run.attempt.activate()
                active.__enter__()
            except Exception:
                self.log.exception("norn task %s: the tracer failed to make its span current", run.id)
                active = contextlib.nullcontext()
        try:
            outcome = _returned(call(task))
        except BaseException as e:  # noqa: B902 - every outcome must be reported
            outcome = _raised(e)
        finally:
            try:
                active.__exit__(None, None, None)
            except Exception:
                self.log.exception("norn task %s: the tracer failed to restore the context", run.id)
        self._finish(run, *outcome)

    # ---- running a chunk -------------------------------------------------------

    def _start_chunk(self, recs: List[Task], sent: float) -> None:
        runs = [self._new_run(rec, sent) for rec in recs]
        tasks = [ActiveTask(self, run) for run in runs]
        t = threading.Thread(target=self._serve_chunk, args=(runs, tasks), name=f"norn-chunk-{runs[0].id}", daemon=True)
        with self._lock:
            for run in runs:
                self._runs[run] = t
            self._cond.notify_all()
        t.start()

    def _serve_chunk(self, runs: List[_Run], tasks: List[ActiveTask]) -> None:
        try:
            for run, task in zip(runs, tasks):
                self._trace_start(run, task)
            assert self.chunk_handler is not None
            try:
                out = self.chunk_handler(list(tasks))
                if out is None:
                    outcomes = [_returned(None)] * len(runs)
                elif isinstance(out, (str, bytes, Mapping)) or not isinstance(out, Sequence) or len(out) != len(runs):
                    n = len(out) if isinstance(out, Sequence) else type(out).__name__
                    bad = ("abort", None, "invalid_outcomes",
                           f"the chunk handler returned {n} outcomes for {len(runs)} tasks (a list, one per task, or None)", None, None)
                    outcomes = [bad] * len(runs)
                else:
                    outcomes = [_raised(o) if isinstance(o, BaseException) else _returned(o) for o in out]
            except BaseException as e:  # noqa: B902 - every outcome must be reported
                outcomes = [_raised(e)] * len(runs)
            # Each task's outcome is its own: reported one by one, each
            # retried on its own, while heartbeats keep the others' leases.
            for run, outcome in zip(runs, outcomes):
                self._finish(run, *outcome)
        finally:
            for run in runs:
                a = run.attempt
                if a is not None:
                    try:
                        a.end()
                    except Exception:
                        self.log.exception("norn task %s: the tracer's span failed to end", run.id)
            with self._lock:
                for run in runs:
                    self._runs.pop(run, None)
                self._cond.notify_all()

    def _finish(self, run: _Run, op: str, result: Any, code: str, desc: str, details: Any,
                exc: Optional[BaseException] = None) -> None:
        with self._lock:
            if run.state != _RUNNING:
                return
            run.state = _FINISHING
        if run.attempt is not None:
            try:
                run.attempt.outcome(op, code, desc.splitlines()[0] if desc else "", exc)
            except Exception:
                self.log.exception("norn task %s: the tracer's span failed", run.id)
        if op == "snooze":
            self.log.info("norn task %s: %s", run.id, details)
        elif op != "complete":
            self.log.info("norn task %s: %s (%s): %s", run.id, op, code, desc.splitlines()[0] if desc else "")
        err = self._report(run, op, result, code, desc, details, exc)
        if op == "snooze" and details.scope is not None and isinstance(err, InvalidArgument) and err.field == "scope":
            # The key has no rate limit to hold back (or the task no key):
            # the task's own snooze still stands, where the lease expiring
            # instead would run it again at once.
            self.log.warning("norn task %s: the key cannot be held back, snoozing the task alone: %s", run.id, err)
            details.scope = None
            err = self._report(run, op, result, code, desc, details, exc)
        if err is not None and op == "complete" and not _gone(err) and not _transient(err):
            # The server refused the result itself (too large): the handler
            # would produce it again, so give up for good.
            self.log.error("norn task %s: result refused, aborting: %s", run.id, err)
            err = self._report(run, "abort", None, "invalid_result", str(err)[:_MAX_DESCRIPTION_CHARS], None)
        if err is None:
            return
        if _gone(err):
            self.log.info("norn task %s: outcome not recorded, the task was cancelled or the lease lost: %s", run.id, err)
        else:
            self.log.error("norn task %s: could not report %s; the task runs again when its lease expires: %s", run.id, op, err)

    def _report(self, run: _Run, op: str, result: Any, code: str, desc: str, details: Any,
                exc: Optional[BaseException] = None) -> Optional[NornError]:
        c = self.client
        delay = 0.1
        give_up = time.monotonic() + max(run.lease_len, 10.0)
        while True:
            try:
                if op == "complete":
                    c.complete(run.id, run.worker, run.lease, result)
                elif op == "fail":
                    c.fail(run.id, run.worker, run.lease, code, desc, details, retry_in=exc.retry_in if isinstance(exc, Fail) else None)
                elif op == "snooze":
                    c.snooze(run.id, run.worker, run.lease, delay=details.delay, run_at=details.run_at,
                             until_signal=details.until_signal, timeout=details.timeout, scope=details.scope)
                else:
                    c.abort(run.id, run.worker, run.lease, code, desc, details)
                return None
            except NornError as e:
                if not _transient(e) or time.monotonic() + delay > give_up:
                    return e
                with self._lock:
                    if run.state == _GONE:
                        return e
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    # ---- heartbeats ----------------------------------------------------------

    def _heartbeats(self) -> None:
        """Keeps every running task's lease alive. One thread serves all
        tasks: whatever is due (or nearly) goes out in one lease batch, so a
        worker running many tasks makes one call per interval. A task with no
        successful heartbeat for a whole lease length is treated as lost:
        another worker may own it by now."""
        while True:
            with self._lock:
                if self._hb_stop:
                    return
                now = time.monotonic()
                nxt = now + 3600
                due: List[_Run] = []
                expired: List[_Run] = []
                for r in self._runs:
                    if r.state not in (_RUNNING, _FINISHING):
                        continue
                    expiry = r.last_ok + r.lease_len
                    if now >= expiry:
                        expired.append(r)
                        continue
                    if r.inflight:
                        continue
                    # Coalesce: what is due within a tenth of its interval
                    # goes out now, so tasks claimed together stay together.
                    if r.next_beat <= now + r.interval / 10:
                        r.inflight = True
                        due.append(r)
                        continue
                    nxt = min(nxt, r.next_beat, expiry)
                if not due and not expired:
                    self._cond.wait(nxt - now)
                    continue
            for r in expired:
                self._lose(r, LeaseLost(f"task {r.id!r}: no heartbeat succeeded for a whole lease; another worker may own it"))
            if due:
                self._beat(due)

    def _beat(self, due: List[_Run]) -> None:
        ops = []
        sent = time.monotonic()
        expiry = sent + 3600
        with self._lock:
            for r in due:
                expiry = min(expiry, r.last_ok + r.lease_len)
                op: Dict[str, Any] = {"op": "heartbeat", "id": r.id, "worker": r.worker, "lease": r.lease}
                if r.progress is not None:
                    op["progress"] = r.progress
                    r.progress = None
                if self._lease_wire is not None:
                    op["extend"] = self._lease_wire
                ops.append(op)
        batch_err: Optional[NornError] = None
        results: List[Any] = []
        try:
            # A heartbeat answered after the earliest lease surely expired is
            # worthless; stop waiting then and let the next round decide.
            results = self.client.lease_batch(ops, _timeout=max(expiry - sent, 0.1))
        except NornError as e:
            batch_err = e
        lost = []
        now = time.monotonic()
        with self._lock:
            for i, r in enumerate(due):
                r.inflight = False
                err = batch_err
                if err is None and isinstance(results[i], NornError):
                    err = results[i]
                if err is None:
                    if sent > r.last_ok:
                        r.last_ok = sent
                    r.next_beat = sent + r.interval
                elif _gone(err):
                    lost.append((r, err))
                else:
                    # Transient: keep the unsent progress and retry soon.
                    if r.progress is None and "progress" in ops[i]:
                        r.progress = ops[i]["progress"]
                    r.next_beat = now + min(r.interval, 0.5)
                    self.log.warning("norn task %s: heartbeat failed, retrying: %s", r.id, err)
        for r, err in lost:
            self._lose(r, err)

    def _beaten(self, run: _Run, sent: float) -> None:
        with self._lock:
            if sent > run.last_ok:
                run.last_ok = sent
                run.next_beat = sent + run.interval
                self._cond.notify_all()

    def _check(self, run: _Run, err: NornError) -> NornError:
        """Reacts to an error of a call made for run (an error meaning the
        task is no longer ours tells the handler to stop) and returns it."""
        if _gone(err):
            self._lose(run, err)
        return err

    def _lose(self, run: _Run, err: NornError) -> None:
        with self._lock:
            if run.state not in (_RUNNING, _FINISHING):
                return
            run.state = _GONE
            if isinstance(err, Cancelled):
                run.reason = Cancelled(err.message, status=err.status)
            elif isinstance(err, NotFound):
                run.reason = LeaseLost(f"task {run.id!r} was deleted: {err.message}", status=err.status)
            else:
                run.reason = LeaseLost(err.message, status=err.status)
            run.stopped.set()
            self._cond.notify_all()
        self.log.info("norn task %s: lost (%s), handler told to stop", run.id, err)

    # ---- shutdown ---------------------------------------------------------------

    def _drain(self) -> None:
        deadline = time.monotonic() + self.shutdown_grace
        with self._lock:
            while self._runs:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        self._yield_all()
        abandon = time.monotonic() + ABANDON_AFTER
        with self._lock:
            threads = list(self._runs.values())
        for t in threads:
            t.join(max(0.0, abandon - time.monotonic()))
        if any(t.is_alive() for t in threads):
            self.log.warning("norn worker %s: abandoning handlers that ignore their cancellation", self._id)

    def _yield_all(self) -> None:
        ops = []
        with self._lock:
            for r in self._runs:
                if r.state != _RUNNING:
                    continue
                r.state = _YIELDED
                r.reason = Shutdown(f"worker {self._id} is shutting down; task {r.id} was yielded")
                r.stopped.set()
                ops.append({"op": "yield", "id": r.id, "worker": r.worker, "lease": r.lease})
        if not ops:
            return
        try:
            results = self.client.lease_batch(ops)
        except NornError as e:
            self.log.error("norn worker %s: yield failed; the tasks run again when their leases expire: %s", self._id, e)
            return
        for op, res in zip(ops, results):
            if isinstance(res, NornError) and not _gone(res):
                self.log.warning("norn task %s: yield failed: %s", op["id"], res)
        self.log.info("norn worker %s: yielded %d unfinished task(s)", self._id, len(ops))


_Outcome = tuple  # (op, result, code, description, details, exception)


def _returned(result: Any) -> _Outcome:
    """The outcome of a handler that returned result."""
    if result is not None:
        try:
            json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as e:
            return "abort", None, "invalid_result", f"the handler's result is not JSON: {e}", None, None
    return "complete", result, "", "", None, None


def _raised(e: BaseException) -> _Outcome:
    """The outcome of a handler that raised e."""
    if isinstance(e, Snooze):
        return "snooze", None, "", "", e, None
    if isinstance(e, Abort):
        return "abort", None, e.code or DEFAULT_ERROR_CODE, _describe(e, False), e.details, e
    if isinstance(e, Fail):
        return "fail", None, e.code or DEFAULT_ERROR_CODE, _describe(e, False), e.details, e
    return "fail", None, DEFAULT_ERROR_CODE, _describe(e, True), None, e


def _no_handler(task: ActiveTask) -> Any:
    # Retrying on this worker could never succeed.
    raise Abort(f"no handler registered for queue {task.queue!r}", code="no_handler")


def _wrap(mw: Middleware, inner: Handler) -> Handler:
    return lambda task: mw(task, inner)


def _gone(err: BaseException) -> bool:
    return isinstance(err, (Cancelled, LeaseLost, NotFound))


def _transient(err: BaseException) -> bool:
    return isinstance(err, (errors.Unavailable, errors.InsufficientStorage, errors.Internal))


def _describe(e: BaseException, with_traceback: bool) -> str:
    """The recorded description of a handler's exception: its message, and
    for unexpected exceptions the traceback (its end, where the cause is,
    when it is long)."""
    if not with_traceback:
        text = str(e) or type(e).__name__
    else:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        text = f"{type(e).__name__}: {e}\n\n{tb}"
    if len(text) > _MAX_DESCRIPTION_CHARS:
        text = text[: _MAX_DESCRIPTION_CHARS // 4] + "\n…\n" + text[-(_MAX_DESCRIPTION_CHARS * 3 // 4) :]
    return text
