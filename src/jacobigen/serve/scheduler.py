"""The decode thread: one loop owns the model and batches requests continuously.

Requests wait in one FIFO queue. The thread serves one :class:`~.fields.Group` (method, window,
sampling: what one engine decodes) at a time with :func:`jacobigen.decode.batching.run`: images of
that group join the running batch at the next step while no request of another group has waited
longer (so no group starves), and leave when done; when the batch drains, the oldest waiting request
picks the next group. A request that did not pin its decoding joins whatever group the load policy
(:mod:`.policy`) allows. Rows of cancelled requests (client gone, deadline passed, shutdown) are freed
at the next step. The batch shares each forward, so an image's distribution depends only on its
prompt, seed, method and window; with ``deterministic`` (row-invariant kernels) its tokens do too,
and it equals ``jacobigen generate --deterministic``'s. PJD's schedule lays out its block by the
batch's rows, so its presets are refused in that mode.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

import torch

from ..core.errors import ConfigError
from ..core.stats import step_compression
from ..decode.api import prompt_rows
from ..decode.batching import Admission, Sequences, capacity, model_prefixes, run
from ..decode.costs import block_size
from ..decode.jacobi import JacobiDecoder
from ..decode.methods import get_method
from .fields import FieldError, Group, ImageRequest, pinned_group
from .images import pictures, png_b64, preview
from .jobs import Image, Job
from .metrics import Metrics
from .policy import BEST, WindowPolicy

log = logging.getLogger("uvicorn.error")
PREVIEW_EVERY = 4  # iterations between preview images of a streamed request
IDLE_POLL = 0.25  # seconds the idle thread sleeps between deadline checks


class QueueFull(Exception):
    """More images wait than ``--max-queue`` (HTTP 429)."""

    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry in about {retry_after} s")
        self.retry_after = retry_after


class Closed(Exception):
    """The server is shutting down (HTTP 503)."""


class Scheduler:
    def __init__(
        self, bundle, max_queue: int, timeout: float, metrics: Metrics, policy: WindowPolicy, deterministic=False
    ):
        self.bundle, self.max_queue, self.timeout, self.deterministic = bundle, max_queue, timeout, deterministic
        self.metrics, self.policy, self.max_batch = metrics, policy, policy.max_batch
        self.cond = threading.Condition()
        self.waiting: deque[Job] = deque()
        self.running: set[Image] = set()
        self.group: Group | None = None  # the group decoding now
        self.closing = self.stopped = False
        self.latency = 2.0  # seconds, a running mean of image latency: Retry-After's estimate
        self.thread = threading.Thread(target=self._serve, name="jacobigen-decode", daemon=True)

    # --- the web layer's side -----------------------------------------------------------------

    def submit(self, req: ImageRequest, post) -> Job:
        """Queue a request; :class:`QueueFull`, :class:`Closed`, or a FieldError for a prompt the model
        cannot read."""
        if len(req.seeds) > self.max_queue:  # never fits, however long the client waits
            raise FieldError(
                "n", f"n={len(req.seeds)} is more images than this server queues (--max-queue {self.max_queue})"
            )
        rows = self._rows(req)
        if self.deterministic and req.method and any(p.kind == "schedule" for p in get_method(req.method).parts):
            raise FieldError(
                "method",
                f"{req.method} lays out its block by the batch's rows, so its images depend on the batch: this "
                "server promises batch-independent images (--deterministic); use a chain method",
            )
        group = pinned_group(req, BEST)
        if group is not None:
            self._check_step(group)
        job = Job(req, [], post, time.monotonic() + self.timeout, group)
        job.images = [Image(job, i, s, r) for i, (s, r) in enumerate(zip(req.seeds, rows, strict=True))]
        with self.cond:
            if self.closing:
                raise Closed("the server is shutting down")
            queued = self.queued()
            if queued + len(job.images) > self.max_queue:
                raise QueueFull(max(1, round(self.latency * (queued + 1) / self.max_batch)))
            self.waiting.append(job)
            self.metrics.batch(queued + len(job.images), len(self.running))
            self.cond.notify()
        return job

    def _step_tokens(self, group: Group, parts) -> int:
        """Model-row tokens one image of ``group`` adds to a step: its rows (two when guided) times its
        block."""
        return (2 if group.sampling.guided else 1) * block_size(parts, self.bundle.layout)

    def _check_step(self, group: Group) -> None:
        """Refuse a window whose step, for one image alone, passes the policy's bound: a cancelled
        request waits for the step in flight before its rows are freed."""
        tokens = self._step_tokens(group, get_method(group.method).build(group.window))
        if self.policy.batch_for(tokens) < 1:
            raise FieldError(
                "window",
                f"window {group.window} makes steps of {tokens} tokens per image, over this server's bound of "
                f"{self.policy.step_tokens} (--max-step-tokens): pick a narrower window",
            )

    def _rows(self, req: ImageRequest) -> list[list[list[int]]]:
        """Each image's model rows, as ``generate`` makes them."""
        try:
            enc = self.bundle.encode([req.prompt])
            if enc.model is not self.bundle.model:
                raise ConfigError("this model's prompts carry state outside their ids: it cannot be served yet")
            uncond = enc.uncond[0] if enc.uncond else None
            rows, _ = prompt_rows(enc.cond[0], req.seeds, uncond, req.sampling.guided)
            rows = model_prefixes(self.bundle.model, self.bundle.layout, rows)
        except ConfigError as e:
            raise FieldError("prompt", str(e)) from e
        g = 2 if req.sampling.guided else 1
        return [rows[i * g : (i + 1) * g] for i in range(len(req.seeds))]

    def start(self) -> None:
        self.thread.start()

    def drain(self, grace: float) -> None:
        """Refuse new requests; what is queued or decoding has ``grace`` seconds to finish, then gets a
        503, and the decode thread stops (SIGTERM)."""
        with self.cond:
            self.closing = self.stopped = True
            end = time.monotonic() + grace
            for job in [*self.waiting, *(i.job for i in self.running)]:
                job.deadline = min(job.deadline, end)
            self.cond.notify()

    def close(self, grace: float) -> None:
        """:meth:`drain`, then wait for the decode thread."""
        self.drain(grace)
        if self.thread.ident is not None:  # started
            self.thread.join(grace + 30)

    def load(self) -> int:
        """Images in flight and waiting."""
        return len(self.running) + self.queued()

    def queued(self) -> int:
        """Images waiting to join the batch (any thread: the lock is reentrant)."""
        with self.cond:
            return sum(len(j.images) - j.admitted for j in self.waiting)

    # --- the decode thread ----------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            with self.cond:
                while True:
                    self._expire(time.monotonic())
                    if self.waiting or self.stopped:
                        break
                    self.cond.wait(IDLE_POLL)
                if not self.waiting:
                    return
                head = self.waiting[0]
                if head.group is None:
                    head.group = self.policy.group(self.load(), head.request.sampling)
                self.group = head.group
            try:
                self._run(self.group)
            except Exception as e:  # a fault of the model or the decoder: fail its requests, keep serving
                log.exception("decoding failed")
                with self.cond:
                    # the jobs decoding, or the one whose group failed to build (else it would retry forever)
                    for job in {img.job for img in self.running} or {head}:
                        job.fail(500, f"decoding failed: {type(e).__name__}: {e}")
                    self.running.clear()
            with self.cond:
                self.group = None
                self.metrics.batch(self.queued(), 0)

    def _run(self, group: Group) -> None:
        parts = get_method(group.method).build(group.window)
        decoder = JacobiDecoder(
            self.bundle.model,
            self.bundle.layout,
            group.sampling,
            parts,
            latents=self.bundle.latents,
            deterministic=self.deterministic,
        )
        engine = decoder.engine
        longest = self.bundle.model.max_seq_len - self.bundle.layout.length  # any prompt the model takes
        batch = max(1, self.policy.batch_for(self._step_tokens(group, parts)))  # steps within the policy's bound
        with torch.inference_mode():
            run(engine, Live(self, group), batch, capacity(engine, longest))

    def _expire(self, now: float) -> None:
        """Fail waiting requests past their deadline (under the lock)."""
        for job in [j for j in self.waiting if now > j.deadline or j.ended]:
            self.waiting.remove(job)
            self._timed_out(job)

    def _timed_out(self, job: Job) -> None:
        if self.closing:
            job.fail(503, "the server shut down before the request finished")
        else:
            job.fail(504, f"the request took longer than the server's limit of {self.timeout:g} s")


class Live(Sequences):
    """The scheduler's queue as the batch loop's source, for one group."""

    watching = True

    def __init__(self, scheduler: Scheduler, group: Group):
        self.s, self.group = scheduler, group
        self.layout = scheduler.bundle.layout

    def _joining(self) -> list[Job]:
        """Waiting jobs that may join now, oldest first: up to the first that may not (FIFO). Jobs that
        ended while waiting (the client left) leave the queue first, so none of them blocks it."""
        s, out = self.s, []
        s._expire(time.monotonic())
        load = s.load()
        for job in s.waiting:
            if job.group is None and s.policy.fits(self.group, load, job.request.sampling):
                job.group = self.group
            if job.group != self.group:
                break
            out.append(job)
        return out

    def waiting(self) -> int:
        with self.s.cond:
            return sum(len(j.images) - j.admitted for j in self._joining())

    def take(self, n: int) -> list[Admission]:
        out: list[Admission] = []
        with self.s.cond:
            for job in self._joining():
                while job.admitted < len(job.images) and len(out) < n:
                    img = job.images[job.admitted]
                    job.admitted += 1
                    self.s.running.add(img)
                    out.append(Admission(img, img.rows, img.seed))
                if job.admitted == len(job.images):
                    self.s.waiting.remove(job)
            self.s.metrics.batch(self.s.queued(), len(self.s.running))
        return out

    def finish(self, keys, tokens, when, iterations) -> None:
        now, length = time.monotonic(), self.layout.length
        for img, t, w, its in zip(keys, tokens, when, iterations.tolist(), strict=True):
            job = img.job
            with self.s.cond:
                self.s.running.discard(img)
            if job.ended:  # cancelled while its last step ran
                continue
            forwards = 1 + its  # the prefill, then one per iteration
            compression = step_compression(length, forwards)
            job.results[img.index] = {
                "b64_json": png_b64(pictures(self.s.bundle, t[None])[0]),  # alone, as `generate` decodes one image
                "seed": img.seed,
                "method": self.group.method,
                "window": self.group.window,
                "stats": {"forwards": forwards, "step_compression": compression, "seconds": now - job.submitted},
                "acceptance": self.layout.grid(w[None])[0].tolist(),
            }
            self.s.metrics.compression.observe(compression)
            self.s.latency = 0.9 * self.s.latency + 0.1 * (now - job.submitted)
            if len(job.results) == len(job.images):
                self.s.metrics.latency.observe(now - job.submitted)
                job.finish()
        with self.s.cond:
            self.s.metrics.batch(self.s.queued(), len(self.s.running))

    def cancelled(self) -> set:
        now = time.monotonic()
        with self.s.cond:
            self.s._expire(now)
            gone = {img for img in self.s.running if img.job.ended or now > img.job.deadline}
            for img in gone:
                self.s.running.discard(img)
                self.s._timed_out(img.job)  # no-op for a job already ended
            if gone:
                self.s.metrics.batch(self.s.queued(), len(self.s.running))
            return gone

    def watch(self, fl, keys, tokens) -> None:
        self.s.metrics.iteration(tokens, len(self.s.running))
        streamed = [i for i in self.s.running if i.job.request.stream]
        if not streamed:
            return
        rows = {keys[q]: r for r, q in enumerate(fl.seq.tolist()) if q >= 0}
        committed, iteration = fl.committed.tolist(), fl.iteration.tolist()
        for img in streamed:
            r = rows.get(img)
            if r is None or img.job.ended:
                continue
            event = {"image": img.index, "tokens": min(committed[r], self.layout.length), "iteration": iteration[r]}
            if iteration[r] % PREVIEW_EVERY == 1:
                length = self.layout.length
                event["b64_json"] = png_b64(preview(self.s.bundle, fl.board[r, :length], fl.when[r]))
                event["acceptance"] = self.layout.grid(fl.when[r][None])[0].tolist()
            img.job.post({"event": "progress", "data": event})
