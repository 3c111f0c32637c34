"""Norn's Python SDK: a client of the Norn HTTP API and a worker.

    import norn

    client = norn.Client()                       # $NORN_SERVER, $NORN_TOKEN
    task = client.submit("emails", {"to": "ada@example.com"})

    def send(task):
        task.set_progress(0.5)
        return {"sent": task.spec["to"]}         # completes with this result

    norn.Worker(client, handlers={"emails": send}, concurrency=4).run()

Standard library only; Python 3.9 or later.
"""

from .client import DEFAULT_SERVER, Client, Stream
from .errors import (
    Cancelled,
    Conflict,
    Duplicate,
    Internal,
    InvalidArgument,
    LeaseLost,
    NornError,
    NotFound,
    PermissionDenied,
    Shutdown,
    TooLarge,
    Unauthenticated,
    Unavailable,
    InsufficientStorage,
)
from . import tracing
from .types import LogEntry, Record, Task
from .worker import Abort, ActiveTask, ChunkHandler, Fail, Middleware, Snooze, Worker

__version__ = "0.1.0"

__all__ = [
    "tracing",
    "Client",
    "DEFAULT_SERVER",
    "Stream",
    "Worker",
    "ActiveTask",
    "Middleware",
    "ChunkHandler",
    "Abort",
    "Fail",
    "Snooze",
    "Task",
    "LogEntry",
    "Record",
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
    "InsufficientStorage",
    "Internal",
    "Shutdown",
]
