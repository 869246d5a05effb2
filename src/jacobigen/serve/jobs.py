"""A request as the decode thread sees it: its images, its events, its end.

The decode thread and the web layer share only :class:`Job`: the thread appends results and posts
events through ``post`` (thread-safe: it hands them to the web layer's event loop); the web layer
reads events and may cancel. A job ends once: done, or failed with an HTTP status and a message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import LEFT, error_body
from .fields import Group, ImageRequest


@dataclass(eq=False)
class Image:
    """One image of a job: the sequence the batch decodes (its key in :mod:`..decode.batching`)."""

    job: Job
    index: int
    seed: int
    rows: list[list[int]]  # model rows: cond (and uncond when guided), header included


@dataclass(eq=False)
class Job:
    request: ImageRequest
    images: list[Image]
    post: Callable[[dict], None]  # an event to the web layer (any thread)
    deadline: float  # time.monotonic() past which the job is cancelled
    group: Group | None = None  # None until the policy decides (or pinned at parse)
    admitted: int = 0  # images that have joined the batch (in order)
    submitted: float = field(default_factory=time.monotonic)
    results: dict = field(default_factory=dict)  # image index -> result dict
    _ended: threading.Event = field(default_factory=threading.Event)

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    def finish(self) -> None:
        if not self._ended.is_set():
            self._ended.set()
            data = [self.results.pop(i) for i in range(len(self.images))]  # the batch loop outlives the job
            self.post({"event": "completed", "data": {"created": int(time.time()), "data": data}})

    def fail(self, status: int, message: str) -> None:
        """End the job with an error (idempotent: the first end wins)."""
        if not self._ended.is_set():
            self._ended.set()
            self.post({"event": "error", "status": status, "data": error_body(status, message)})

    def cancel(self) -> None:
        """The client left: end quietly; the decode thread frees the job's rows at its next step."""
        self.fail(LEFT, "the client closed the request")
