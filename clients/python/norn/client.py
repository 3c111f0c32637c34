"""The HTTP client of the Norn API."""

from __future__ import annotations

import datetime as _dt
import http.client
import json
import os
import select
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from . import errors
from ._wire import Duration, Time, format_duration, format_time, parse_duration, retry_policy
from .errors import InvalidArgument, NornError, Unavailable
from .types import LogEntry, Record, Task

__all__ = ["Client", "Stream", "DEFAULT_SERVER"]

T = TypeVar("T")

DEFAULT_SERVER = "http://127.0.0.1:7070"
USER_AGENT = "norn-python-client/1"

# An error body is a small JSON object; a misbehaving proxy must not make us
# buffer more.
_MAX_ERROR_BODY = 64 << 10
# Added to a claim's wait for the socket timeout, so a long poll ends on
# the server's schedule, not ours.
_CLAIM_SLACK = 30.0
# Methods safe to send again when a kept-alive connection turns out to have
# been closed by the server.
_IDEMPOTENT = frozenset(("GET", "HEAD", "DELETE", "PUT"))

_StrList = Union[str, Sequence[str]]
_TERMINAL = frozenset(("completed", "aborted", "cancelled"))


class _Abort:
    """Lets another thread cut a request short (the worker's shutdown ends
    its long-poll claim this way). Shutting the socket down wakes a thread
    blocked reading it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: Optional[http.client.HTTPConnection] = None
        self.aborted = False

    def attach(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if self.aborted:
                raise Unavailable("request aborted")
            self._conn = conn

    def detach(self) -> None:
        with self._lock:
            self._conn = None

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            conn = self._conn
            if conn is not None and conn.sock is not None:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _Pool:
    """Kept-alive connections to one server, shared by threads."""

    def __init__(self, scheme: str, host: str, port: Optional[int], ssl_context: Optional[ssl.SSLContext]) -> None:
        self._scheme, self._host, self._port = scheme, host, port
        self._ssl = ssl_context
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.closed = False

    def get(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if _dropped(conn):
                conn.close()
                continue
            conn.timeout = timeout
            conn.sock.settimeout(timeout)
            return conn, True
        if self._scheme == "https":
            ctx = self._ssl or ssl.create_default_context()
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=ctx), False
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout), False

    def put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self.closed and len(self._idle) < 32:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection was closed by the server: an idle socket
    that is readable has hit EOF (or holds garbage), either way unusable."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Stream(Iterator[T]):
    """An iterator over a streamed response (``list``, ``events``) that
    holds one connection until it ends. ``close()`` stops it early, also
    from another thread while a ``next()`` is waiting for data (the
    iteration then simply ends); ``with`` closes it too, and so does
    dropping the last reference to it."""

    def __init__(self, resp: http.client.HTTPResponse, conn: http.client.HTTPConnection,
                 decode: "Callable[[Iterator[bytes]], Iterator[T]]") -> None:
        self._conn = conn
        self._closed = [False]  # shared with the line reader, which must not refer to self
        self._it = decode(_read_lines(resp, conn, self._closed))

    def __iter__(self) -> "Stream[T]":
        return self

    def __next__(self) -> T:
        return next(self._it)

    def close(self) -> None:
        """Ends the stream and its connection."""
        self._closed[0] = True
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self._it.close()  # type: ignore[attr-defined]
        except ValueError:
            return  # running in another thread, which sees the end and closes the connection
        self._conn.close()  # a generator never started has no finally to run

    def __del__(self) -> None:
        if not self._closed[0]:
            try:
                self.close()
            except Exception:
                pass

    def __enter__(self) -> "Stream[T]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _read_lines(resp: http.client.HTTPResponse, conn: http.client.HTTPConnection, closed: List[bool]) -> Iterator[bytes]:
    try:
        while True:
            try:
                line = resp.readline()
            except (OSError, ValueError, http.client.HTTPException) as e:
                if closed[0]:
                    return
                raise Unavailable(f"stream interrupted: {e}") from e
            if not line or closed[0]:
                return
            yield line
    finally:
        conn.close()


def _csv(value: Optional[_StrList]) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return ",".join(value)


def _task(obj: Any, duplicate: bool = False, replaced: bool = False) -> Task:
    if not isinstance(obj, dict):
        raise errors.Internal("cannot decode server response: expected a task object")
    return Task(obj, duplicate=duplicate, replaced=replaced)


def _submitted(s: Any) -> Task:
    """A task of a submit answer ``{"task", "duplicate", "replaced"}``."""
    s = s or {}
    return _task(s.get("task"), bool(s.get("duplicate")), bool(s.get("replaced")))


class Client:
    """A client of a Norn server. Safe to share between threads.

    ``url`` defaults to ``$NORN_SERVER`` (else ``http://127.0.0.1:7070``),
    ``token`` to ``$NORN_TOKEN`` (sent as ``Authorization: Bearer``).
    ``timeout`` bounds every call in seconds, except that a long-poll claim
    is given its wait on top and streams (``list``, ``events``) wait for
    data as long as it takes. ``ssl_context`` verifies https servers
    (default: the system's CAs).

    Every method raises a :class:`norn.NornError` subclass for the server's
    error code (``norn.NotFound``, ``norn.InvalidArgument`` with ``field``,
    ...) and :class:`norn.Unavailable` when the server cannot be reached.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        timeout: float = 30.0,
        ssl_context: Optional[ssl.SSLContext] = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        if url is None:
            url = os.environ.get("NORN_SERVER") or DEFAULT_SERVER
        if token is None:
            token = os.environ.get("NORN_TOKEN") or None
        parsed = urllib.parse.urlsplit(url.strip())
        if parsed.scheme not in ("http", "https"):
            raise InvalidArgument(f"server URL {url!r} must start with http:// or https://", field="server")
        if not parsed.hostname:
            raise InvalidArgument(f"server URL {url!r} has no host", field="server")
        try:
            port = parsed.port
        except ValueError as e:
            raise InvalidArgument(f"invalid server URL {url!r}: {e}", field="server") from None
        if timeout is not None and timeout <= 0:
            raise InvalidArgument("must be positive", field="timeout")
        self.url = urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path.rstrip("/"), "", ""))
        self._prefix = parsed.path.rstrip("/")
        self._host = parsed.netloc
        self._token = token
        self._timeout = timeout
        self._ua = user_agent
        self._pool = _Pool(parsed.scheme, parsed.hostname, port, ssl_context)

    def __repr__(self) -> str:
        return f"norn.Client({self.url!r})"

    def close(self) -> None:
        """Closes idle connections; calls afterwards raise Unavailable."""
        self._pool.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- transport ------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Sequence[Tuple[str, str]]] = None,
        body: Any = None,
        accept: str = "application/json",
        timeout: Optional[float] = -1.0,
        abort: Optional[_Abort] = None,
    ) -> Tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
        """Sends a request and returns a 2xx response (not yet read) with its
        connection; other statuses raise the server's error."""
        if self._pool.closed:
            raise Unavailable("client is closed")
        target = self._prefix + path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": accept, "User-Agent": self._ua, "Host": self._host}
        data = None
        if body is not None:
            try:
                data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
            except (TypeError, ValueError) as e:
                raise InvalidArgument(f"cannot encode request as JSON: {e}", field="body") from None
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = "Bearer " + self._token
        if timeout == -1.0:
            timeout = self._timeout
        for attempt in (0, 1):
            conn, reused = self._pool.get(timeout)
            if abort is not None:
                try:
                    abort.attach(conn)
                except Unavailable:
                    self._pool.put(conn)
                    raise
            try:
                conn.request(method, target, body=data, headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if abort is not None and abort.aborted:
                    raise Unavailable("request aborted") from None
                if reused and attempt == 0 and method in _IDEMPOTENT:
                    continue
                raise Unavailable(f"cannot reach {self.url}: {e or type(e).__name__}") from e
            finally:
                if abort is not None:
                    abort.detach()
            if 200 <= resp.status <= 299:
                return resp, conn
            try:
                raw = resp.read(_MAX_ERROR_BODY + 1)
            except (OSError, http.client.HTTPException):
                raw = b""
            if len(raw) > _MAX_ERROR_BODY or not resp.isclosed():
                conn.close()
            else:
                self._pool.put(conn)
            raise errors.from_response(resp.status, raw[:_MAX_ERROR_BODY])
        raise AssertionError("unreachable")

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        """Sends a request and returns its decoded JSON body."""
        resp, conn = self._send(method, path, **kw)
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Unavailable(f"reading the response of {method} {path}: {e}") from e
        if resp.will_close:
            conn.close()
        else:
            self._pool.put(conn)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise errors.Internal(f"cannot decode server response: {e}") from None

    # ---- tasks ------------------------------------------------------------

    @staticmethod
    def _new_task(queue: str, spec: Any, options: Mapping[str, Any], field: str = "") -> Dict[str, Any]:
        prefix = field + "." if field else ""
        nt: Dict[str, Any] = {"queue": queue}
        if spec is not None:
            nt["spec"] = spec
        for key, value in options.items():
            if value is None:
                continue
            if key in ("delay", "timeout", "max_runtime", "unique_for", "expire_in", "debounce_max"):
                value = format_duration(value, prefix + key)
            elif key in ("run_at", "expires_at"):
                value = format_time(value, prefix + key)
            elif key == "retry":
                value = retry_policy(value, prefix + key)
            elif key == "depends_on" and isinstance(value, str):
                value = [value]
            # Other keys go as given: fields added to the API after this
            # client still reach the server, which refuses what it does not
            # know.
            nt[key] = value
        return nt

    @classmethod
    def _new_tasks(cls, tasks: Iterable[Mapping[str, Any]], field: str) -> List[Dict[str, Any]]:
        out = []
        for i, t in enumerate(tasks):
            if not isinstance(t, Mapping):
                raise InvalidArgument("each task is a dict with queue, spec and options", field=f"{field}[{i}]")
            opts = dict(t)
            queue = opts.pop("queue", None)
            spec = opts.pop("spec", None)
            out.append(cls._new_task(queue, spec, opts, f"{field}[{i}]"))
        return out

    def submit(self, queue: str, spec: Any = None, **options: Any) -> Task:
        """Submits one task and returns it (``task.duplicate`` is True when
        nothing was created: ``id`` existed, or ``unique_key`` is held; the
        existing task is returned; ``task.replaced`` is True when that task
        was replaced, see ``on_duplicate``).

        ``spec`` is any JSON-encodable value. Options: ``id`` (makes the
        submit idempotent), ``priority``, ``labels`` (dict of strings),
        ``run_at`` (datetime or RFC 3339) or ``delay``, ``depends_on`` (task
        ids), ``max_attempts``, ``retry`` (``{"max_retries": 5, "base": 20,
        "max": 3600, "jitter": "full"}``; without one the task follows the
        queue's policy or the server's default of 24 retries),
        ``expires_at`` or ``expire_in`` (the deadline by which it must have
        started, else it ends aborted with code ``expired``), ``batch`` (joins
        the batch of this id, see :meth:`create_batch`: NotFound if there is
        none, Conflict once it is sealed, both with ``field`` ``"batch"``),
        ``on_dependency_failure`` (``"abort"``, the default: a dependency
        that ends aborted, cancelled or deleted aborts this task with
        ``dependency_failed``; ``"run"``: it becomes ready once every
        dependency ended, whatever the outcome, and reads them in
        ``dependency_results``), ``sequence_key`` (joins the sequence of
        the queue and this key: its members run one at a time in submit
        order whatever their priority, later ones wait ``blocked``; it
        cannot be combined with ``depends_on``, see :meth:`sequence`),
        ``unique_key`` (while a task of the queue with this key has not
        ended, submit nothing and return that task; ``unique_for`` extends
        this to tasks that ended less than that long ago),
        ``on_duplicate`` (``"keep"``, the default: return the holder of
        the key unchanged; ``"replace"``: debounce, a holder that has not
        started takes this task's spec, labels, priority and run time, its
        id stays and ``replaced`` is True; a holder already running or
        waiting for a retry gets this task as its successor, a new task
        that waits for it to end whatever the outcome and takes the key),
        ``debounce_max`` (with ``"replace"``: replacements move the
        holder's run time at most this long after it was first submitted),
        ``timeout`` (lease length), ``traceparent`` and
        ``tracestate`` (the W3C trace context to store with the task, see
        :mod:`norn.tracing`). Durations are seconds, timedeltas or Go
        duration strings (``"1h30m"``).
        """
        out = self._call("POST", "/v1/tasks", body=self._new_task(queue, spec, options))
        return _submitted(out)

    def submit_batch(self, tasks: Iterable[Mapping[str, Any]]) -> List[Task]:
        """Submits tasks atomically (all or none) and returns them in order.
        Each is a dict with ``queue``, ``spec`` and the options of
        :meth:`submit`; tasks may depend on earlier ones of the batch by id.
        An invalid task refuses the batch with ``field`` naming it
        (``tasks[3].queue``). ``duplicate`` and ``replaced`` are set on
        each returned task as for :meth:`submit`."""
        out = self._call("POST", "/v1/tasks/batch", body={"tasks": self._new_tasks(tasks, "tasks")})
        dups = set(out.get("duplicates") or ())
        replaced = set(out.get("replaced") or ())
        return [_task(t, t.get("id") in dups, i in replaced) for i, t in enumerate(out.get("tasks") or ())]

    def get(self, id: str) -> Task:
        """Returns one task; raises NotFound."""
        out = self._call("GET", "/v1/tasks/" + _seg(id))
        return _task(out.get("task"))

    def wait(self, id: str, timeout: Optional[float] = None) -> Task:
        """Waits until the task finishes (completed, aborted or cancelled)
        and returns it, following its state changes as server-sent events
        rather than polling. Raises ``TimeoutError`` after ``timeout``
        seconds (None: no limit) and NotFound if the task is deleted."""
        deadline = None if timeout is None else time.monotonic() + timeout
        # Subscribe first, then read: a change between the two is not missed.
        with self.events(task=id) as stream:
            timer = None
            if deadline is not None:
                timer = threading.Timer(max(0.0, deadline - time.monotonic()), stream.close)
                timer.daemon = True
                timer.start()
            try:
                task = self.get(id)
                if task.terminal:
                    return task
                for event in stream:
                    if event.get("kind") == "TaskDelete":
                        raise errors.NotFound(f"task {id!r} was deleted")
                    if event.get("kind") == "Lagged" or event.get("status") in _TERMINAL:
                        task = self.get(id)
                        if task.terminal:
                            return task
            finally:
                if timer is not None:
                    timer.cancel()
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"task {id!r} did not finish within {timeout} seconds")
        raise Unavailable(f"the event stream ended before task {id!r} finished")

    def get_many(self, ids: Sequence[str]) -> Tuple[List[Task], List[str]]:
        """Returns the tasks that exist (in the order asked) and the ids
        that do not."""
        ids = list(ids)
        if not ids:
            return [], []
        if len(ids) == 1:
            try:
                return [self.get(ids[0])], []
            except errors.NotFound:
                return [], [ids[0]]
        out = self._call("GET", "/v1/tasks/" + ",".join(_seg(i) for i in ids))
        return [_task(t) for t in out.get("tasks") or ()], list(out.get("missing") or ())

    @staticmethod
    def _filters(
        queue: Optional[_StrList] = None,
        status: Optional[_StrList] = None,
        labels: Optional[Mapping[str, str]] = None,
        owner: Optional[str] = None,
        id_contains: Optional[str] = None,
        created_after: Optional[Time] = None,
        created_before: Optional[Time] = None,
        updated_after: Optional[Time] = None,
        updated_before: Optional[Time] = None,
        **extra: Any,
    ) -> List[Tuple[str, str]]:
        q: List[Tuple[str, str]] = []
        if queue is not None:
            q.append(("queue", _csv(queue)))
        if status is not None:
            q.append(("status", _csv(status)))
        for k, v in sorted((labels or {}).items()):
            q.append(("label", f"{k}:{v}"))
        if owner is not None:
            q.append(("owner", owner))
        if id_contains is not None:
            q.append(("id_contains", id_contains))
        for key, value in (
            ("created_after", created_after),
            ("created_before", created_before),
            ("updated_after", updated_after),
            ("updated_before", updated_before),
        ):
            if value is not None:
                q.append((key, format_time(value, key)))
        # Filters added to the API after this client: passed as given, the
        # server refuses what it does not know.
        for key, value in extra.items():
            if value is None:
                continue
            if isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            q.append((key, str(value)))
        return q

    @classmethod
    def _query(cls, filters: Mapping[str, Any], limit: int, cursor: Optional[str], order: Optional[str], summary: bool) -> List[Tuple[str, str]]:
        q = cls._filters(**filters)
        if limit:
            q.append(("limit", str(limit)))
        if cursor:
            q.append(("cursor", cursor))
        if order and order != "id":
            q.append(("order", order))
        if summary:
            q.append(("view", "summary"))
        return q

    def list(
        self,
        *,
        limit: int = 0,
        order: Optional[str] = None,
        summary: bool = False,
        **filters: Any,
    ) -> "Stream[Task]":
        """Iterates over every task matching the filters, streamed as NDJSON
        one task at a time, so memory stays constant however many match.

        Filters (all optional, all must match): ``queue`` and ``status``
        (a string, comma list or sequence; statuses also take the aliases
        ``pending``, ``succeeded``, ``failed``, ``terminal``), ``labels``
        (dict), ``owner``, ``id_contains``, ``created_after``,
        ``created_before``, ``updated_after``, ``updated_before``,
        ``depends_on`` (the tasks listing this id among their dependencies),
        ``unique_key`` and ``batch`` (the members of this batch).
        ``limit`` caps the total (0 = all), ``order`` is ``"id"`` (oldest
        first), ``"newest"`` or ``"priority"``; ``summary=True`` omits spec,
        result, errors and history.

        The request is sent at once (bad filters raise here). To stop early,
        close the stream or iterate in a ``with client.list(...) as tasks:``
        block.
        """
        q = self._query(filters, limit, None, order, summary)
        resp, conn = self._send("GET", "/v1/tasks", query=q, accept="application/x-ndjson", timeout=None)
        return Stream(resp, conn, _decode_tasks)

    def list_page(
        self,
        *,
        limit: int = 0,
        cursor: Optional[str] = None,
        order: Optional[str] = None,
        summary: bool = False,
        **filters: Any,
    ) -> Tuple[List[Task], Optional[str]]:
        """One page of :meth:`list` (``limit`` default 100, max 1000) and the
        cursor of the next page (None on the last page)."""
        out = self._call("GET", "/v1/tasks", query=self._query(filters, limit, cursor, order, summary))
        return [_task(t) for t in out.get("tasks") or ()], out.get("next_cursor") or None

    def count(self, **filters: Any) -> int:
        """How many tasks match the filters of :meth:`list`."""
        out = self._call("GET", "/v1/tasks/count", query=self._filters(**filters))
        return int(out["count"])

    def count_groups(self, **filters: Any) -> List[Record]:
        """Counts of the tasks matching the filters of :meth:`list` per
        queue and status: records ``{"queue", "status", "count"}``."""
        q = self._filters(**filters) + [("group", "queue,status")]
        out = self._call("GET", "/v1/tasks/count", query=q)
        return [Record(g) for g in out.get("groups") or ()]

    def cancel(self, id: str) -> Task:
        """Cancels a task that has not finished; its worker sees the
        cancellation at its next heartbeat. A completed or aborted task
        raises Conflict."""
        out = self._call("POST", "/v1/tasks/" + _seg(id) + "/cancel", body={})
        return _task(out.get("task"))

    def retry(self, id: str, *, run_at: Optional[Time] = None, with_dependents: bool = False) -> Task:
        """Puts an aborted or cancelled task back to ready (or scheduled until
        ``run_at``) with its attempts reset; ``with_dependents`` also brings
        back the dependents aborted because of it."""
        body: Dict[str, Any] = {}
        if run_at is not None:
            body["run_at"] = format_time(run_at, "run_at")
        if with_dependents:
            body["with_dependents"] = True
        out = self._call("POST", "/v1/tasks/" + _seg(id) + "/retry", body=body)
        return _task(out.get("task"))

    def retry_matching(self, **filters: Any) -> int:
        """Retries every aborted or cancelled task matching the filters of
        :meth:`list` (at least one is required) and returns how many."""
        q = self._filters(**filters)
        if not q:
            raise InvalidArgument("retrying by filter needs at least one filter", field="filter")
        out = self._call("POST", "/v1/tasks/retry", query=q, body={})
        return int(out["retried"])

    def cancel_matching(self, **filters: Any) -> int:
        """Cancels every pending task matching the filters of :meth:`list`
        (at least one is required) and returns how many; each cancel is
        what :meth:`cancel` does (dependents abort)."""
        q = self._filters(**filters)
        if not q:
            raise InvalidArgument("cancelling by filter needs at least one filter", field="filter")
        out = self._call("POST", "/v1/tasks/cancel", query=q, body={})
        return int(out["cancelled"])

    def update(
        self,
        id: str,
        *,
        priority: Optional[int] = None,
        run_at: Optional[Time] = None,
        labels: Optional[Mapping[str, str]] = None,
        if_version: Optional[int] = None,
    ) -> Task:
        """Changes a task that is scheduled, blocked or ready (Conflict
        otherwise, and when ``if_version`` is not the task's version).
        ``labels`` replaces every label (``{}`` clears them)."""
        body: Dict[str, Any] = {}
        if priority is not None:
            body["priority"] = priority
        if run_at is not None:
            body["run_at"] = format_time(run_at, "run_at")
        if labels is not None:
            body["labels"] = dict(labels)
        if if_version is not None:
            body["if_version"] = if_version
        out = self._call("PATCH", "/v1/tasks/" + _seg(id), body=body)
        return _task(out.get("task"))

    def delete(self, id: str) -> None:
        """Deletes one task; raises NotFound."""
        self._call("DELETE", "/v1/tasks/" + _seg(id))

    def delete_matching(self, **filters: Any) -> int:
        """Deletes every task matching the filters of :meth:`list` (at least
        one is required) and returns how many."""
        q = self._filters(**filters)
        if not q:
            raise InvalidArgument("deleting by filter needs at least one filter", field="filter")
        out = self._call("DELETE", "/v1/tasks", query=q)
        return int(out["deleted"])

    def read_log(self, id: str, *, after: int = 0, limit: int = 0) -> List[LogEntry]:
        """The task's update log entries after sequence number ``after``
        (at most ``limit``, 0 = all)."""
        q = []
        if after:
            q.append(("after", str(after)))
        if limit:
            q.append(("limit", str(limit)))
        out = self._call("GET", "/v1/tasks/" + _seg(id) + "/log", query=q)
        return [LogEntry(e) for e in out.get("entries") or ()]

    def transact(
        self,
        *,
        submit: Sequence[Mapping[str, Any]] = (),
        update: Sequence[Mapping[str, Any]] = (),
        cancel: Sequence[str] = (),
        delete: Sequence[str] = (),
        require: Sequence[Mapping[str, Any]] = (),
    ) -> Record:
        """Applies submits, updates (``{"id", "priority", "run_at",
        "labels", "if_version"}``), cancels and deletes all or nothing,
        after every requirement (``{"id", "version"}``) holds. Returns
        ``{"submitted", "updated", "cancelled", "deleted"}``: lists of tasks
        (a submitted one has ``duplicate`` set when its id existed) and the
        number deleted."""
        body: Dict[str, Any] = {}
        if submit:
            body["submit"] = self._new_tasks(submit, "submit")
        if update:
            ups = []
            for i, u in enumerate(update):
                u = dict(u)
                if u.get("run_at") is not None:
                    u["run_at"] = format_time(u["run_at"], f"update[{i}].run_at")
                ups.append(u)
            body["update"] = ups
        if cancel:
            body["cancel"] = list(cancel)
        if delete:
            body["delete"] = list(delete)
        if require:
            body["require"] = [dict(r) for r in require]
        out = self._call("POST", "/v1/transactions", body=body)
        rec = Record(out)
        rec["submitted"] = [_submitted(s) for s in rec.get("submitted") or ()]
        for key in ("updated", "cancelled"):
            rec[key] = [_task(t) for t in rec.get(key) or ()]
        return rec

    # ---- schedules ----------------------------------------------------------

    @staticmethod
    def _schedule_body(fields: Mapping[str, Any]) -> Dict[str, Any]:
        body: Dict[str, Any] = {}
        for key, value in fields.items():
            if value is None:
                continue
            if key in ("timeout", "max_runtime"):
                value = format_duration(value, key)
            elif key == "retry":
                value = retry_policy(value, key)
            body[key] = value
        return body

    def set_schedule(self, name: str, *, queue: str, cron: str, spec: Any = None, **fields: Any) -> Record:
        """Creates or replaces the schedule ``name``, which submits a task
        to ``queue`` on every tick of ``cron`` (5 or 6 fields, or
        ``@hourly``, ``@every 30s``...). Fields: ``timezone`` (IANA name,
        default UTC), ``priority``, ``labels``, ``timeout``, ``retry``,
        ``max_attempts``, ``max_runtime``, ``overlap`` (``allow``/``skip``),
        ``catch_up`` (``one``/``all``/``none``), ``paused``."""
        body = self._schedule_body({"queue": queue, "cron": cron, "spec": spec, **fields})
        return Record(self._call("PUT", "/v1/schedules/" + _seg(name), body=body)["schedule"])

    def schedules(self) -> List[Record]:
        """Every schedule, with its ``next_fire``, ``last_fire`` and ``last_task``."""
        return [Record(x) for x in self._call("GET", "/v1/schedules").get("schedules") or ()]

    def schedule(self, name: str) -> Record:
        """One schedule; raises NotFound."""
        return Record(self._call("GET", "/v1/schedules/" + _seg(name))["schedule"])

    def update_schedule(self, name: str, **fields: Any) -> Record:
        """Changes some fields of a schedule (``paused=True`` pauses it)."""
        return Record(self._call("PATCH", "/v1/schedules/" + _seg(name), body=self._schedule_body(fields))["schedule"])

    def delete_schedule(self, name: str) -> None:
        """Deletes a schedule (the tasks it submitted stay)."""
        self._call("DELETE", "/v1/schedules/" + _seg(name))

    def trigger_schedule(self, name: str) -> Task:
        """Submits the schedule's task now, outside its cadence."""
        out = self._call("POST", "/v1/schedules/" + _seg(name) + "/trigger", body={})
        return _task(out.get("task"))

    # ---- batches --------------------------------------------------------------

    def create_batch(
        self,
        *,
        id: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        on_success: Optional[Mapping[str, Any]] = None,
        on_complete: Optional[Mapping[str, Any]] = None,
        seal: bool = False,
        tasks: Iterable[Mapping[str, Any]] = (),
    ) -> Record:
        """Creates a batch: tasks join it by naming it at submit
        (``submit(queue, spec, batch=id)``) until it is sealed. Once sealed
        and every member ended, ``on_complete`` is submitted (id
        ``norn:batch:<id>:complete``), and ``on_success`` too when every
        member completed; each callback carries the labels ``norn.batch``,
        ``norn.callback``, ``norn.total``, ``norn.completed``,
        ``norn.aborted`` and ``norn.cancelled``.

        Callbacks are dicts like the tasks of :meth:`submit_batch` (``queue``,
        ``spec`` and options), without ``id``, ``batch`` or ``depends_on``.
        ``tasks`` are members submitted with the batch, all or nothing;
        ``seal=True`` creates it sealed with them as its only members.
        ``id`` is optional (the server picks one); an existing id raises
        Conflict. Returns ``{"batch": Record, "tasks": [Task]}``, each task
        with ``duplicate`` set when its id or unique key existed."""
        body: Dict[str, Any] = {}
        if id is not None:
            body["id"] = id
        if labels is not None:
            body["labels"] = dict(labels)
        for field, cb in (("on_success", on_success), ("on_complete", on_complete)):
            if cb is None:
                continue
            if not isinstance(cb, Mapping):
                raise InvalidArgument("a callback is a dict with queue, spec and options", field=field)
            opts = dict(cb)
            body[field] = self._new_task(opts.pop("queue", None), opts.pop("spec", None), opts, field)
        if seal:
            body["seal"] = True
        members = self._new_tasks(tasks, "tasks")
        if members:
            body["tasks"] = members
        out = self._call("POST", "/v1/batches", body=body)
        return Record(
            batch=Record(out["batch"]),
            tasks=[_submitted(s) for s in out.get("tasks") or ()],
        )

    def get_batch(self, id: str) -> Record:
        """One batch: ``state`` (``open``, ``sealed`` or ``done``), ``total``
        and ``counts`` (its members now, by status), ``final`` (the counts
        when it became done), ``complete_task`` and ``success_task`` (the
        callbacks' ids once submitted). Raises NotFound."""
        return Record(self._call("GET", "/v1/batches/" + _seg(id))["batch"])

    def list_batches(
        self,
        state: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        after: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> List[Record]:
        """One page of batches in id order, of ``state`` and with every
        label of ``labels`` when given. ``limit`` is the page size (default
        100, max 1000); pass the last id of a page as ``after`` for the
        next."""
        q: List[Tuple[str, str]] = []
        if state is not None:
            q.append(("state", state))
        for k, v in sorted((labels or {}).items()):
            q.append(("label", f"{k}:{v}"))
        if after is not None:
            q.append(("after", after))
        if limit is not None:
            q.append(("limit", str(limit)))
        return [Record(b) for b in self._call("GET", "/v1/batches", query=q).get("batches") or ()]

    def seal_batch(self, id: str) -> Record:
        """Closes a batch to new members and returns it; its callbacks can
        fire from then on. Sealing a sealed or done batch changes nothing."""
        return Record(self._call("POST", "/v1/batches/" + _seg(id) + "/seal", body={})["batch"])

    def delete_batch(self, id: str, members: bool = False) -> int:
        """Deletes a batch; its members stay unless ``members=True``.
        Returns how many members were deleted."""
        q = [("members", "true")] if members else None
        return int(self._call("DELETE", "/v1/batches/" + _seg(id), query=q)["deleted"])

    # ---- queues and administration ---------------------------------------

    def queues(self) -> List[Record]:
        """Every queue with its counts, pause state and defaults."""
        return [Record(q) for q in self._call("GET", "/v1/queues").get("queues") or ()]

    def queue(self, name: str) -> Record:
        """One queue (an unused queue reads as empty with defaults)."""
        return Record(self._call("GET", "/v1/queues/" + _seg(name))["queue"])

    def update_queue(self, name: str, **settings: Any) -> Record:
        """Changes a queue's settings (role admin): ``paused``, ``timeout``,
        ``max_runtime``, ``retry``, ``max_attempts``, ``retention`` (``{"completed": "24h",
        ...}``), ``sequence_on_failure`` (``"halt"``, the default: an aborted
        head halts its sequence until it is retried or deleted;
        ``"continue"``: the sequence moves on past it), the flow limits
        (``max_running``, ``key_limit``, ``fair_by``, ``rate_limit``,
        ``key_rate_limit``: each as the server takes it, e.g.
        ``key_rate_limit={"per_second": 5, "burst": 10}`` gives every
        concurrency key its own bucket, ``{"per_second": 0}`` removes it),
        ``keys`` (each key's own settings, only the named members change:
        ``keys={"acme": {"limit": 2, "rate_limit": {"per_second": 50}}}``;
        ``None`` for a key removes its settings) and any setting the server
        has added since."""
        body: Dict[str, Any] = {}
        for key, value in settings.items():
            if key in ("timeout", "max_runtime") and value is not None:
                value = format_duration(value, key)
            elif key == "retry" and value is not None:
                value = retry_policy(value, key)
            elif key == "retention" and isinstance(value, Mapping):
                value = {k: format_duration(v, f"retention.{k}") for k, v in value.items()}
            body[key] = value
        return Record(self._call("PATCH", "/v1/queues/" + _seg(name), body=body)["queue"])

    def sequence(self, queue: str, key: str) -> Record:
        """The state of the sequence of ``queue`` and ``key`` (tasks submitted
        with ``sequence_key=key``): ``head`` (the id of the one member that
        may run now, None when there is none), ``head_status``, ``halted``
        (the head ended aborted and the queue's ``sequence_on_failure`` is
        ``"halt"``: retry or delete the head to go on) and ``waiting`` (the
        members waiting their turn). A sequence nobody used reads as empty."""
        for field, value in (("queue", queue), ("key", key)):
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"{field} is required", field=field)
        return Record(self._call("GET", "/v1/queues/" + _seg(queue) + "/sequences/" + _seg(key))["sequence"])

    def sequences(self, queue: str, halted: bool = False, after: Optional[str] = None, limit: Optional[int] = None) -> List[Record]:
        """The sequences of ``queue`` that have a head, by key, each as
        ``sequence`` returns it; ``halted=True``: only the halted ones (the
        ones waiting for an operator). ``after`` (a key) and ``limit``
        (default 100, max 1000) page."""
        if not isinstance(queue, str) or not queue:
            raise InvalidArgument("queue is required", field="queue")
        q: List[Tuple[str, str]] = []
        if halted:
            q.append(("halted", "true"))
        if after:
            q.append(("after", after))
        if limit is not None:
            q.append(("limit", str(limit)))
        return [Record(x) for x in self._call("GET", "/v1/queues/" + _seg(queue) + "/sequences", query=q).get("sequences") or ()]

    def stats(self) -> Record:
        """Counts per queue and status, totals and worker numbers."""
        return Record(self._call("GET", "/v1/stats"))

    def throughput(self, queue: Union[None, str, Sequence[str]] = None, since: Union[None, Time, Duration] = None) -> Record:
        """The server's per-minute counts of submitted, completed and failed
        tasks (at most the last 24 hours) of the given queues summed, or of
        all: ``{"since", "until", "recording_since", "points": [{"t",
        "submitted", "completed", "failed"}]}``. ``since`` is a datetime or
        RFC 3339 string, or a duration (seconds, timedelta, ``"90m"``) meaning
        that long ago. The server counts from its start, in memory."""
        q: List[Tuple[str, str]] = []
        if queue:
            q.append(("queue", queue if isinstance(queue, str) else ",".join(queue)))
        if since is not None:
            if isinstance(since, (_dt.datetime, str)) and not (isinstance(since, str) and _is_duration(since)):
                q.append(("since", format_time(since, "since")))
            else:
                q.append(("since", format_duration(since, "since")))
        return Record(self._call("GET", "/v1/stats/throughput", query=q))

    def workers(self) -> List[Record]:
        """The registered workers."""
        return [Record(w) for w in self._call("GET", "/v1/workers").get("workers") or ()]

    def whoami(self) -> Record:
        """What the caller's token may do: ``{"role", "queues", "auth"}``."""
        return Record(self._call("GET", "/v1/whoami"))

    def sweep(self) -> Record:
        """Runs the monitor duties due now (role admin): lease timeouts,
        releases of delayed tasks, retention purges."""
        return Record(self._call("POST", "/v1/sweep", body={}))

    def events(self, *, queue: Optional[_StrList] = None, task: Optional[str] = None) -> "Stream[Record]":
        """Follows task state changes (server-sent events) as records
        ``{"kind", "task_id", "queue", "status", "version", "time"}``. The
        subscription is in place when this returns; the iterator blocks
        until the next event. Close it to stop."""
        q: List[Tuple[str, str]] = []
        if queue is not None:
            for name in [queue] if isinstance(queue, str) else queue:
                q.append(("queue", name))
        if task is not None:
            q.append(("task", task))
        resp, conn = self._send("GET", "/v1/events", query=q, accept="text/event-stream", timeout=None)
        return Stream(resp, conn, _decode_events)

    # ---- worker calls -----------------------------------------------------
    # The building blocks of norn.Worker, for those who run tasks their own
    # way. Every lease call names the lease it holds: (task id, worker id,
    # lease number).

    def register_worker(self, name: str = "", queues: Sequence[str] = ()) -> str:
        """Allocates a worker id (``"worker-7"``)."""
        body: Dict[str, Any] = {"name": name}
        if queues:
            body["queues"] = list(queues)
        return self._call("POST", "/v1/workers", body=body)["id"]

    def claim(
        self,
        worker: str,
        queues: _StrList,
        *,
        n: int = 1,
        timeout: Optional[Duration] = None,
        wait: Optional[Duration] = None,
        weights: Optional[Mapping[str, int]] = None,
        min: Optional[int] = None,
        linger: Optional[Duration] = None,
        group_by: Optional[str] = None,
        _abort: Optional[_Abort] = None,
    ) -> List[Task]:
        """Leases up to ``n`` ready tasks from ``queues`` (in preference
        order) for ``worker``. ``timeout`` overrides the lease length;
        ``wait`` long-polls when nothing is ready (max 5 minutes).
        ``weights`` (``{"emails": 3, "reports": 1}``) shares claims between
        the queues by weight instead of their order.

        ``min`` makes a batch claim: it answers only once at least ``min``
        tasks are ready in ``queues`` (at most ``n``), or once the one
        ready longest has waited ``linger`` (which needs a ``min`` of 2 or
        more); until then it waits within ``wait`` and answers ``[]`` when
        the wait ends first.

        ``group_by`` (``"concurrency_key"`` or ``"label:NAME"``) makes every
        task of the answer share that value: the answer is the group of the
        first task in claim order that has ``min`` ready tasks, or whose task
        ready longest has waited ``linger``."""
        body: Dict[str, Any] = {"worker": worker, "queues": [queues] if isinstance(queues, str) else list(queues), "n": n}
        if weights:
            body["weights"] = dict(weights)
        if min is not None:
            body["min"] = min
        if linger is not None:
            body["linger"] = format_duration(linger, "linger")
        if group_by:
            body["group_by"] = group_by
        if timeout is not None:
            body["timeout"] = format_duration(timeout, "timeout")
        sock_timeout = self._timeout
        if wait is not None:
            body["wait"] = format_duration(wait, "wait")
            if sock_timeout is not None:
                sock_timeout += parse_duration(body["wait"]) + _CLAIM_SLACK
        out = self._call("POST", "/v1/claim", body=body, timeout=sock_timeout, abort=_abort)
        return [_task(t) for t in out.get("tasks") or ()]

    def heartbeat(
        self,
        id: str,
        worker: str,
        lease: int,
        *,
        progress: Optional[float] = None,
        extend: Optional[Duration] = None,
    ) -> str:
        """Extends a lease (by ``extend``, default the task's timeout) and
        optionally records progress (0..1); returns the new deadline."""
        body: Dict[str, Any] = {"worker": worker, "lease": lease}
        if progress is not None:
            body["progress"] = progress
        if extend is not None:
            body["extend"] = format_duration(extend, "extend")
        return self._call("POST", "/v1/tasks/" + _seg(id) + "/heartbeat", body=body)["deadline"]

    def heartbeat_signals(
        self,
        id: str,
        worker: str,
        lease: int,
        after: int = 0,
        *,
        progress: Optional[float] = None,
        extend: Optional[Duration] = None,
    ) -> Tuple[str, List[Record]]:
        """A :meth:`heartbeat` that also answers with the task's signals
        after sequence number ``after`` (0: all), in order: returns the new
        deadline and those signals."""
        body: Dict[str, Any] = {"worker": worker, "lease": lease, "signals_after": after}
        if progress is not None:
            body["progress"] = progress
        if extend is not None:
            body["extend"] = format_duration(extend, "extend")
        out = self._call("POST", "/v1/tasks/" + _seg(id) + "/heartbeat", body=body)
        return out["deadline"], [Record(x) for x in out.get("signals") or ()]

    def append_log(self, id: str, worker: str, lease: int, data: Any, *, seq: Optional[int] = None) -> LogEntry:
        """Appends ``data`` to the task's update log; with ``seq`` the entry
        must get exactly that number (Conflict otherwise)."""
        body: Dict[str, Any] = {"worker": worker, "lease": lease, "data": data}
        if seq is not None:
            body["seq"] = seq
        return LogEntry(self._call("POST", "/v1/tasks/" + _seg(id) + "/log", body=body)["entry"])

    def complete(self, id: str, worker: str, lease: int, result: Any = None) -> None:
        """Finishes a task successfully with an optional JSON result."""
        body: Dict[str, Any] = {"worker": worker, "lease": lease}
        if result is not None:
            body["result"] = result
        self._call("POST", "/v1/tasks/" + _seg(id) + "/complete", body=body)

    def fail(self, id: str, worker: str, lease: int, code: str, description: str = "", args: Optional[Mapping[str, Any]] = None,
             *, retry_in: Optional[Duration] = None) -> None:
        """Records a failed attempt: the task is retried per its policy, or
        aborted when none remains. ``retry_in`` (seconds, timedelta or a
        duration string) asks for that wait instead of the policy's backoff,
        capped by the policy's max; it never adds a retry."""
        body = _finish_body(worker, lease, code, description, args)
        if retry_in is not None:
            body["error"]["retry_in"] = format_duration(retry_in, "retry_in")
        self._call("POST", "/v1/tasks/" + _seg(id) + "/fail", body=body)

    def abort(self, id: str, worker: str, lease: int, code: str, description: str = "", args: Optional[Mapping[str, Any]] = None) -> None:
        """Finishes a task unsuccessfully for good."""
        self._call("POST", "/v1/tasks/" + _seg(id) + "/abort", body=_finish_body(worker, lease, code, description, args))

    def snooze(
        self,
        id: str,
        worker: str,
        lease: int,
        *,
        delay: Optional[Duration] = None,
        run_at: Optional[Time] = None,
        until_signal: Optional[str] = None,
        timeout: Optional[Duration] = None,
        scope: Optional[str] = None,
    ) -> None:
        """Puts the task back until ``delay`` from now (or ``run_at``)
        without spending an attempt. With ``until_signal`` instead it stays
        scheduled until a signal of that name arrives (then ready at once;
        one sent before this call counts) or ``timeout`` passes (default
        24h; then ready with ``signal_wait.received`` False). Give exactly
        one of ``delay``, ``run_at`` and ``until_signal``.

        ``scope="key"`` (with ``delay`` or ``run_at``) also holds back the
        task's concurrency key: its rate-limit bucket is emptied, so no
        task of the key is claimed before the snooze ends while other keys'
        tasks go on. The key needs a rate limit (the queue's
        ``key_rate_limit`` or its own ``rate_limit``); otherwise the call
        raises InvalidArgument with field ``scope`` and changes nothing."""
        body: Dict[str, Any] = {"worker": worker, "lease": lease}
        if delay is not None:
            body["delay"] = format_duration(delay, "delay")
        if run_at is not None:
            body["run_at"] = format_time(run_at, "run_at")
        if until_signal is not None:
            body["until_signal"] = until_signal
        if timeout is not None:
            body["timeout"] = format_duration(timeout, "timeout")
        if scope is not None:
            body["scope"] = scope
        self._call("POST", "/v1/tasks/" + _seg(id) + "/snooze", body=body)

    def send_signal(self, id: str, name: str, data: Any = None) -> Record:
        """Sends the task a signal named ``name`` with optional JSON
        ``data``; a task waiting for that name (:meth:`snooze` with
        ``until_signal``) becomes ready. The task keeps every signal, in
        order. Returns the signal as stored: ``seq``, ``name``, ``data``,
        ``time``. NotFound for a missing task, Conflict for one that ended."""
        body: Dict[str, Any] = {"name": name}
        if data is not None:
            body["data"] = data
        return Record(self._call("POST", "/v1/tasks/" + _seg(id) + "/signals", body=body)["signal"])

    def list_signals(self, id: str, *, after: int = 0) -> List[Record]:
        """The task's signals with a sequence number above ``after``, in
        order (records with ``seq``, ``name``, ``data``, ``time``)."""
        q = [("after", str(after))] if after else []
        out = self._call("GET", "/v1/tasks/" + _seg(id) + "/signals", query=q)
        return [Record(x) for x in out.get("signals") or ()]

    def await_children(
        self,
        id: str,
        worker: str,
        lease: int,
        tasks: Iterable[Mapping[str, Any]],
        *,
        on_child_failure: Optional[str] = None,
    ) -> Tuple[Task, List[Task]]:
        """Submits ``tasks`` (dicts as for :meth:`submit_batch`) as children
        of the leased task, atomically, and makes the task wait for them:
        its lease ends without counting an attempt, it is blocked until
        every child ended, then ready again, and its next claim carries the
        children's outcomes in ``dependency_results``. A failed child aborts
        it (``dependency_failed``) unless ``on_child_failure`` is
        ``"continue"``. Returns the task as it now is and the children in
        request order (``duplicate`` set on those whose id existed).
        Awaiting again from a later attempt adds more children."""
        body: Dict[str, Any] = {"worker": worker, "lease": lease, "tasks": self._new_tasks(tasks, "tasks")}
        if on_child_failure is not None:
            body["on_child_failure"] = on_child_failure
        out = self._call("POST", "/v1/tasks/" + _seg(id) + "/await", body=body)
        children = [_submitted(c) for c in out.get("children") or ()]
        return _task(out.get("task")), children

    def yield_(self, id: str, worker: str, lease: int) -> None:
        """Gives a task back: ready again at once, the attempt does not count."""
        self._call("POST", "/v1/tasks/" + _seg(id) + "/yield", body={"worker": worker, "lease": lease})

    def lease_batch(self, ops: Sequence[Mapping[str, Any]], *, _timeout: Optional[float] = -1.0) -> List[Union[Record, NornError]]:
        """Applies many lease operations in one request. Each op is a dict
        ``{"op": "heartbeat"|"complete"|"fail"|"abort"|"yield", "id",
        "worker", "lease", ...}`` with the fields of the single calls
        (``progress``, ``extend``, ``result``, ``error``). Returns one item
        per op, in order: a record (``{"deadline": ...}`` for a heartbeat)
        or the NornError of that op; one failing op does not stop the
        others."""
        body = []
        for i, op in enumerate(ops):
            op = dict(op)
            if op.get("extend") is not None:
                op["extend"] = format_duration(op["extend"], f"ops[{i}].extend")
            body.append(op)
        out = self._call("POST", "/v1/leases/batch", body={"ops": body}, timeout=_timeout)
        results = out.get("results") or []
        if len(results) != len(body):
            raise errors.Internal(f"server returned {len(results)} results for {len(body)} lease operations")
        items: List[Union[Record, NornError]] = []
        for r in results:
            err = errors.from_wire((r or {}).get("error"))
            items.append(err if err is not None else Record(r or {}))
        return items


def _decode_tasks(lines: Iterator[bytes]) -> Iterator[Task]:
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise errors.Internal(f"cannot decode streamed task: {e}") from None
        if isinstance(obj, dict) and "error" in obj and "id" not in obj:
            # The server failed mid-stream and said so on the last line.
            raise errors.from_wire(obj["error"]) or errors.Internal("stream ended with an unreadable error")
        yield _task(obj)


def _decode_events(lines: Iterator[bytes]) -> Iterator[Record]:
    data: List[str] = []
    for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                try:
                    yield Record(json.loads("\n".join(data)))
                except ValueError as e:
                    raise errors.Internal(f"cannot decode event: {e}") from None
                data = []
            continue
        if line.startswith(":"):
            continue  # keep-alive comment
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)


def _finish_body(worker: str, lease: int, code: str, description: str, args: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    e: Dict[str, Any] = {"code": code}
    if description:
        e["description"] = description
    if args:
        e["args"] = dict(args)
    return {"worker": worker, "lease": lease, "error": e}


def _seg(id: str) -> str:
    """One path segment; an empty id is refused as the stores refuse it."""
    if not isinstance(id, str) or not id:
        raise InvalidArgument("id is required", field="id")
    return urllib.parse.quote(id, safe="")


def _is_duration(s: str) -> bool:
    try:
        parse_duration(s)
        return True
    except ValueError:
        return False
