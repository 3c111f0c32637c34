"""Records the API returns."""

from __future__ import annotations

import datetime as _dt
from typing import Any, List, Optional

from ._wire import parse_duration, parse_time

__all__ = ["Task", "LogEntry"]


class Record(dict):
    """A JSON object from the server: a dict (so it prints, compares and
    serialises as the wire form, and keeps fields this client does not know
    yet) whose keys also read as attributes; an absent key reads as None."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self.get(name)

    def __dir__(self):
        return sorted(set(dir(type(self))) | set(self.keys()))


class Task(Record):
    """A task as the API shows it: ``task.id``, ``task.queue``,
    ``task.status``, ``task.spec``, ``task.result``, ``task.lease``, ...
    (see the Task schema of the API). Times are RFC 3339 strings and
    durations Go duration strings on the wire; the ``*_at``/``*_seconds``
    helpers convert them.

    ``duplicate`` is True on a task returned by a submit that created
    nothing: its id existed already, or a task of the queue holds its
    ``unique_key`` (that task is returned). ``replaced`` is True when such a
    submit (``on_duplicate="replace"``) replaced the holder in place: the
    task returned is the holder with the submission's spec, labels,
    priority and run time."""

    __slots__ = ("duplicate", "replaced")

    def __init__(self, *args: Any, duplicate: bool = False, replaced: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.duplicate = duplicate
        self.replaced = replaced

    def time(self, key: str) -> Optional[_dt.datetime]:
        """The time field key (``"created"``, ``"run_at"``, ``"deadline"``,
        ...) as an aware datetime, or None when absent."""
        return parse_time(self.get(key))

    @property
    def timeout_seconds(self) -> Optional[float]:
        """The lease length granted on claim and heartbeat, in seconds."""
        t = self.get("timeout")
        return parse_duration(t) if t else None

    @property
    def dependency_results(self) -> List[Record]:
        """The outcomes of the dependencies (and awaited children) that
        ended, in ``depends_on`` order: records with ``id``, ``status``
        (``completed``, ``aborted``, ``cancelled`` or ``deleted``),
        ``result`` (completed ones) and ``error`` (failed ones). They stay
        with the task after the dependencies are purged."""
        return [Record(r) for r in self.get("dependency_results") or ()]

    @property
    def signals(self) -> List[Record]:
        """The signals the task received, in order: records with ``seq``,
        ``name``, ``data`` and ``time`` (empty in the summary view)."""
        return [Record(x) for x in self.get("signals") or ()]

    @property
    def signal_wait(self) -> Optional[Record]:
        """The task's last wait for a signal (a snooze with
        ``until_signal``): a record with ``name``, ``until`` and
        ``received`` (False once the task runs again: the wait timed out),
        or None if it never waited."""
        w = self.get("signal_wait")
        return Record(w) if isinstance(w, dict) else None

    @property
    def terminal(self) -> bool:
        """Whether the task has finished (completed, aborted or cancelled)."""
        return self.get("status") in ("completed", "aborted", "cancelled")


class LogEntry(Record):
    """One entry of a task's update log: ``seq``, ``lease``, ``time``, ``data``."""

    __slots__ = ()
