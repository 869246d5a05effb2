"""What ``GET /metrics`` shows (Prometheus text format), in a registry of the server's own.

Counters for rates (Prometheus takes ``rate()`` of them) and, for a reader without Prometheus, the
same rates over the last ``WINDOW`` seconds as gauges.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

WINDOW = 10.0  # seconds of the rate gauges


class Metrics:
    def __init__(self, max_batch: int):
        self.registry = r = CollectorRegistry()
        self.queue_depth = Gauge("jacobigen_queue_depth", "images waiting to join the batch", registry=r)
        self.batch_rows = Gauge("jacobigen_batch_rows", "images decoding now", registry=r)
        self.occupancy = Gauge("jacobigen_batch_occupancy", "images decoding now / --max-batch", registry=r)
        self.tokens = Counter("jacobigen_tokens", "tokens committed", registry=r)
        self.forwards = Counter("jacobigen_forwards", "forward passes, one per image per iteration", registry=r)
        self.model_calls = Counter(
            "jacobigen_model_calls", "shared model forwards, one per iteration for the whole batch", registry=r
        )
        last = f"per second over the last {WINDOW:g} s"
        self.tokens_rate = Gauge("jacobigen_tokens_per_second", f"tokens committed {last}", registry=r)
        self.forwards_rate = Gauge("jacobigen_forwards_per_second", f"forward passes {last}", registry=r)
        self.compression = Histogram(
            "jacobigen_step_compression",
            "per image: AR's forward passes over the method's",
            buckets=(1, 1.25, 1.5, 2, 2.5, 3, 4, 6, 8),
            registry=r,
        )
        self.latency = Histogram(
            "jacobigen_request_seconds",
            "request latency, submit to last image",
            buckets=(0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60, 120),
            registry=r,
        )
        self.requests = Counter(
            "jacobigen_requests",
            "image requests by outcome: the HTTP status, a stream's last event's, 499 when the client left first; "
            "and 401 refusals of any path",
            ["status"],
            registry=r,
        )
        self.max_batch = max_batch
        self._recent: deque = deque()  # (time, tokens, forwards) of recent iterations
        self._lock = threading.Lock()

    def iteration(self, tokens: int, forwards: int) -> None:
        """One decode iteration: ``tokens`` committed by ``forwards`` image rows sharing one model call."""
        self.tokens.inc(tokens)
        self.forwards.inc(forwards)
        self.model_calls.inc()
        now = time.monotonic()
        with self._lock:
            self._recent.append((now, tokens, forwards))
            self._rates(now)

    def batch(self, waiting: int, running: int) -> None:
        self.queue_depth.set(waiting)
        self.batch_rows.set(running)
        self.occupancy.set(running / self.max_batch)

    def _rates(self, now: float) -> None:
        while self._recent and self._recent[0][0] < now - WINDOW:
            self._recent.popleft()
        self.tokens_rate.set(sum(t for _, t, _ in self._recent) / WINDOW)
        self.forwards_rate.set(sum(f for _, _, f in self._recent) / WINDOW)

    def refresh(self) -> None:
        """Age the rate gauges (an idle server's rates fall to 0): called before each scrape."""
        with self._lock:
            self._rates(time.monotonic())
