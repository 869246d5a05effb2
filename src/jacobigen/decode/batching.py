"""The batch beside the step (:class:`Batch`): admit, refill, grow, cancel, compact.

B rows are in flight; each decodes one sequence and advances by its own accepted length. When a
sequence finishes, its row takes the next waiting sequence (prefilled apart and moved into the
shared cache); once nothing waits and a quarter of the rows are done, finished rows leave the batch
so the forward stops paying for them. A newcomer gets its own seed and iteration 0, so it draws
exactly what it would alone. The loop reads the device once per iteration (a few counters).

Sequences come from a :class:`Sequences` source: :func:`decode` gives a fixed list; the image server
(:mod:`jacobigen.serve`) a live queue that fills while the loop runs, so the batch also grows (up to
its limit) when more wait than rows are free, and rows whose sequence the source cancels are freed.
It is one loop for both, so a served image is the image :func:`decode` makes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core.cache import cache_slots
from ..core.errors import ConfigError
from ..core.invariant import KEYS
from ..core.limits import batch_that_fits
from ..core.stats import DecodeStats
from .engine import Engine, Flight, model_rows


@dataclass(frozen=True)
class Admission:
    """One waiting sequence: ``key`` names it to its source; ``rows`` are its model rows (cond, uncond
    when guided, each ending with the layout's header: :func:`model_prefixes`)."""

    key: object
    rows: list[list[int]]
    seed: int


class Sequences:
    """Where the loop's sequences come from and where they go. ``watching``: call :meth:`watch` after
    every iteration (it costs one host read of the committed count)."""

    watching = False

    def waiting(self) -> int:
        """Sequences ready to join now."""
        raise NotImplementedError

    def take(self, n: int) -> list[Admission]:
        """Up to ``n`` of the waiting sequences, oldest first."""
        raise NotImplementedError

    def finish(self, keys: list, tokens: torch.Tensor, when: torch.Tensor, iterations: torch.Tensor) -> None:
        """These sequences finished: tokens and acceptance maps [n, length], iterations run [n]."""
        raise NotImplementedError

    def cancelled(self) -> set:
        """Keys of sequences in flight to drop now (their rows are freed without output)."""
        return set()

    def watch(self, fl: Flight, keys: list, tokens: int) -> None:
        """After an iteration that committed ``tokens`` tokens in all; row r decodes ``keys[fl.seq[r]]``."""


class Listed(Sequences):
    """A fixed list of sequences, keyed by their index; the outputs land in ``tokens`` and ``when``."""

    def __init__(self, prefixes, seeds, group, length, device, on_progress=None):
        self.rows = [prefixes[i * group : (i + 1) * group] for i in range(len(seeds))]
        self.seeds, self.next, self.on_progress = seeds, 0, on_progress
        self.watching = on_progress is not None
        self.tokens = torch.zeros(len(seeds), length, dtype=torch.int64, device=device)
        self.when = torch.zeros(len(seeds), length, dtype=torch.int64, device=device)

    def waiting(self) -> int:
        return len(self.seeds) - self.next

    def take(self, n: int) -> list[Admission]:
        ids = range(self.next, min(self.next + n, len(self.seeds)))
        self.next += len(ids)
        if self.on_progress and ids:
            self.on_progress(len(ids))
        return [Admission(i, self.rows[i], self.seeds[i]) for i in ids]

    def finish(self, keys, tokens, when, iterations) -> None:
        self.tokens[keys], self.when[keys] = tokens, when

    def watch(self, fl, keys, tokens) -> None:
        self.on_progress(tokens)


def model_prefixes(model, layout, prefixes: list[list[int]]) -> list[list[int]]:
    """Prompt rows as ``model`` reads them (the layout's header appended), checked: a
    :class:`ConfigError` for an empty row, an id outside the vocabulary or a row too long."""
    prefixes = [list(p) + list(layout.header) for p in prefixes]
    longest = max(len(p) for p in prefixes)
    if longest + layout.length > model.max_seq_len:
        raise ConfigError(
            f"prompt of {longest} tokens plus {layout.length} image tokens exceeds the model's context of "
            f"{model.max_seq_len}"
        )
    if min(len(p) for p in prefixes) < 1:
        raise ConfigError("every prompt needs at least one token")
    if any(t < 0 or t >= model.vocab_size for p in prefixes for t in p):
        raise ConfigError(f"prompt token ids must lie in [0, {model.vocab_size})")
    return prefixes


def capacity(engine: Engine, longest: int) -> int:
    """Cache slots per row for prompt rows of at most ``longest`` tokens (header included). When
    deterministic, the slots of the longest prompt the model takes, whatever the batch holds:
    attention's rounding depends on how many (masked) slots it reads, so they are also rounded up to
    the attention's key block (:data:`jacobigen.core.invariant.KEYS`): the same slots for every window."""
    if engine.deterministic:
        longest = engine.model.max_seq_len - engine.layout.length
    slots = cache_slots(longest, engine.layout.length, engine.schedule.block_slack)
    return -(-slots // KEYS) * KEYS if engine.deterministic else slots


def decode(
    engine: Engine,
    prefixes: list[list[int]],
    seeds: list[int],
    batch_size: int | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """prefixes: one token list per model row (cond, uncond interleaved when guided); seeds: one
    per sequence. Returns (tokens [N, length], DecodeStats)."""
    with torch.inference_mode():
        t_start = time.perf_counter()
        group, total = engine.group, len(seeds)
        if len(prefixes) != total * group:
            raise ConfigError(f"expected {total * group} prefixes for {total} sequences, got {len(prefixes)}")
        prefixes = model_prefixes(engine.model, engine.layout, prefixes)
        slots = capacity(engine, max(len(p) for p in prefixes))
        source = Listed(prefixes, seeds, group, engine.layout.length, engine.device, on_progress)
        stats = DecodeStats.start(total)
        capture_before = engine.capture_time
        run(engine, source, batch_size, slots, stats, total)
        stats.finish(nfe=engine.nfe, wall=time.perf_counter() - t_start, forward=engine.measured_forward_time)
        stats.capture_time = engine.capture_time - capture_before
        stats.when = source.when.cpu()
        return source.tokens, stats


def run(
    engine: Engine,
    source: Sequences,
    batch_size: int | None,
    slots: int,
    stats: DecodeStats | None = None,
    expected: int | None = None,
) -> None:
    """Decode what ``source`` gives until no row runs and nothing waits: at most ``batch_size`` rows
    (None: as many as fit, planned for ``expected`` sequences), each with ``slots`` cache slots per
    model row. ``stats`` (indexed by the order of admission) records every iteration when given."""
    limit = batch_that_fits(
        engine.model,
        engine.device,
        expected or batch_size or 1,
        batch_size,
        engine.group,
        slots,
        engine.schedule.slot_count,
        engine.parts.window,
    )
    rows = min(source.waiting(), limit)
    if rows:
        Batch(engine, source, limit, rows, slots, stats).run()


class Batch:
    """The rows in flight over one shared cache, and the four things done to them around the step:
    :meth:`admit` waiting sequences into free (or new) rows, :meth:`step` all rows with one shared
    forward, :meth:`retire` finished and cancelled ones, :meth:`compact` the batch once nothing waits.
    ``keys`` holds the source's key of each sequence by order of admission (what ``flight.seq`` holds)."""

    def __init__(self, engine: Engine, source: Sequences, limit: int, rows: int, slots: int, stats=None):
        self.engine, self.source, self.limit, self.stats = engine, source, limit, stats
        self.group, self.length, self.device = engine.group, engine.layout.length, engine.device
        self.cache = engine.model.new_cache(rows * self.group, slots)
        targets = engine.targets_of  # the tables cover the layout's id span
        self.flight = _empty_flight(
            rows, self.group, engine.schedule.board_width, self.length, targets.span[0], self.device
        )
        engine.schedule.start(rows, targets.width, self.cache)
        engine.parts.drafter.start(rows, engine.schedule.slot_count, targets.width, self.device)
        engine.nfe, engine.forward_time = 0, 0.0
        self.keys: list = []

    def run(self) -> None:
        self.admit()
        running = self.flight.committed < self.length
        if not bool(running.any()):  # what waited was cancelled before it joined: never step empty rows
            return
        while True:
            running, finished = self.step(running)
            freed = self.cancel()
            if finished or freed or (self.flight.seq.shape[0] < self.limit and self.source.waiting()):
                if self.source.waiting():
                    self.admit()
                running = self.flight.committed < self.length
                n_running = int(running.sum())
                if not n_running:
                    return
                if not self.source.waiting() and (freed or 4 * (len(running) - n_running) >= len(running)):
                    running = self.compact(running)

    def step(self, running: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """One iteration of every row, finished sequences retired; returns the rows still running and
        whether any finished."""
        fl, sched = self.flight, self.engine.schedule
        done_now = self.engine.step(fl, self.cache, running)
        step = done_now.tokens
        fl.committed = fl.committed + step
        fl.live = running
        fl.when = torch.where(sched.settled(fl) & (fl.when < 0), fl.iteration.unsqueeze(1), fl.when)
        if self.stats:
            self.stats.record(fl.seq, step, running, done_now.nodes, done_now.off_spine)
        was, running = running, fl.committed < self.length
        done = was & ~running
        if self.source.watching:  # the one host read of the iteration
            n_done, n_tokens = torch.stack([done.sum(), step.sum()]).tolist()
            self.source.watch(fl, self.keys, n_tokens)
        else:
            n_done = int(done.sum())
        if n_done:
            self.retire(done)
        return running, n_done > 0

    def retire(self, done: torch.Tensor) -> None:
        """Hand the finished rows' sequences to the source and free their rows."""
        fl, length = self.flight, self.length
        rows = done.nonzero().flatten()
        keys = [self.keys[i] for i in fl.seq[rows].tolist()]
        self.source.finish(keys, fl.board[rows, :length], fl.when[rows], fl.iteration[rows])
        fl.seq = torch.where(done, -1, fl.seq)

    def cancel(self) -> int:
        """Free the rows of the sequences the source dropped; returns how many."""
        gone = self.source.cancelled()
        ids = [i for i, k in enumerate(self.keys) if k in gone] if gone else []
        if not ids:
            return 0
        fl = self.flight
        drop = torch.isin(fl.seq, torch.tensor(ids, device=self.device))
        fl.seq = torch.where(drop, -1, fl.seq)
        fl.committed = torch.where(drop, self.length, fl.committed)
        return int(drop.sum())

    def compact(self, running: torch.Tensor) -> torch.Tensor:
        """Drop the rows not running (nothing waits to take them), so the forward stops paying for them."""
        rows = running.nonzero().flatten()
        self._select(rows)
        return running[rows]

    def _select(self, rows: torch.Tensor) -> None:
        """Keep batch rows ``rows`` (indices, in that order; a repeated row is a copy)."""
        mrows = model_rows(rows, self.group)
        self.flight.select(rows, mrows)
        self.engine.schedule.select(rows)
        self.cache.select(mrows)
        self.engine.parts.drafter.select(rows)

    def admit(self) -> None:
        """Prefill the next waiting sequences into free rows, adding rows (up to the limit) if more wait."""
        fl, dev, engine = self.flight, self.device, self.engine
        free = (fl.seq < 0).nonzero().flatten()
        rows_now = fl.seq.shape[0]
        new = self.source.take(free.numel() + self.limit - rows_now)
        if not new:
            return
        if len(new) > free.numel():  # the batch grows: new rows start as copies of row 0, then are freed
            extra = torch.zeros(len(new) - free.numel(), dtype=torch.int64, device=dev)
            self._select(torch.cat([torch.arange(rows_now, device=dev), extra]))
            fl.seq[rows_now:], fl.committed[rows_now:] = -1, self.length
            free = torch.cat([free, torch.arange(rows_now, fl.seq.shape[0], device=dev)])
        free = free[: len(new)]
        ids = list(range(len(self.keys), len(self.keys) + len(new)))
        self.keys.extend(a.key for a in new)
        mrows = model_rows(free, self.group)
        pre = [row for a in new for row in a.rows]
        blank = ids[0] == 0 and len(pre) == self.cache.rows  # the first admission fills the whole new cache
        target = self.cache if blank else engine.model.new_cache(len(pre), self.cache.capacity)
        row_seeds = torch.tensor([a.seed for a in new], dtype=torch.int64, device=dev)
        first = engine.prefill(pre, target, row_seeds)
        if target is not self.cache:
            self.cache.assign(mrows, target)
        fresh = torch.zeros(fl.seq.shape[0], dtype=torch.bool, device=dev)
        fresh[free] = True
        fl.seq[free] = torch.tensor(ids, device=dev)
        fl.committed[free] = 1
        fl.base[mrows] = torch.tensor([len(x) for x in pre], device=dev)
        fl.seeds[free], fl.iteration[free] = row_seeds, 0
        fl.when[free] = -1
        fl.when[free, 0] = 0
        fl.live &= ~fresh
        engine.schedule.admit(fl, fresh, first, self.cache)
        engine.parts.drafter.reset(fresh)
        if self.stats:
            self.stats.admit(ids)


def _empty_flight(rows: int, group: int, width: int, length: int, lo: int, device) -> Flight:
    """``rows`` free rows, counted as finished (``committed = length``), whose tables start at id ``lo``."""

    def zeros(*shape):
        return torch.zeros(shape, dtype=torch.int64, device=device)

    return Flight(
        zeros(rows) - 1,
        zeros(rows),
        zeros(rows),
        zeros(rows * group),
        zeros(rows, width),
        zeros(rows) + length,
        torch.zeros(rows, dtype=torch.bool, device=device),
        zeros(rows, length) - 1,
        lo,
    )
