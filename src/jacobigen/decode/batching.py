"""The batch scheduler beside the step: admit, refill, compact.

B rows are in flight; each decodes one sequence and advances by its own accepted length. When a
sequence finishes, its row takes the next waiting prompt (prefilled apart and moved into the
shared cache); once nothing waits and a quarter of the rows are done, finished rows leave the batch
so the forward stops paying for them. A newcomer gets its own seed and iteration 0, so it draws
exactly what it would alone. The loop reads the device once per iteration (a few counters).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from ..core.errors import ConfigError
from ..core.limits import batch_that_fits
from ..core.stats import DecodeStats
from .engine import Engine, Flight, model_rows

# cache slots per row come in steps of this many, so that prompts of similar lengths share the
# shapes of every tensor the step sees (a compiled step compiles once for all of them)
CAPACITY_STEP = 64


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
        return _decode(engine, prefixes, seeds, batch_size, on_progress)


def _decode(engine: Engine, prefixes, seeds, batch_size, on_progress):
    t_start = time.perf_counter()
    model, layout, sched, dev = engine.model, engine.layout, engine.schedule, engine.device
    group, total, length = engine.group, len(seeds), layout.length
    if len(prefixes) != total * group:
        raise ConfigError(f"expected {total * group} prefixes for {total} sequences, got {len(prefixes)}")
    prefixes = [list(p) + list(layout.header) for p in prefixes]
    longest = max(len(p) for p in prefixes)
    if longest + length > model.max_seq_len:
        raise ConfigError(
            f"prompt of {longest} tokens plus {length} image tokens exceeds the model's context of {model.max_seq_len}"
        )
    if min(len(p) for p in prefixes) < 1:
        raise ConfigError("every prompt needs at least one token")
    if any(t < 0 or t >= model.vocab_size for p in prefixes for t in p):
        raise ConfigError(f"prompt token ids must lie in [0, {model.vocab_size})")

    capacity = -(-(longest + length + sched.block_slack) // CAPACITY_STEP) * CAPACITY_STEP
    b = batch_that_fits(model, dev, total, batch_size, group, capacity, sched.slot_count, engine.parts.window)
    cache = model.new_cache(b * group, capacity)
    fl = _empty_flight(b, group, sched.board_width, length, dev)
    queue = torch.tensor(seeds, dtype=torch.int64, device=dev)
    vocab = model.vocab_size
    sched.start(b, vocab, cache)
    engine.parts.drafter.start(b, sched.slot_count, vocab, dev)
    engine.nfe, engine.forward_time = 0, 0.0
    capture_before = engine.capture_time
    stats = DecodeStats.start(total)
    out = torch.zeros(total, length, dtype=torch.int64, device=dev)
    when = torch.zeros(total, length, dtype=torch.int64, device=dev)
    admitted = 0

    def admit() -> None:
        """Prefill the next waiting sequences into free rows."""
        nonlocal admitted
        free = (fl.seq < 0).nonzero().flatten()[: total - admitted]
        if not free.numel():
            return
        ids = list(range(admitted, admitted + free.numel()))
        first_admission = admitted == 0
        admitted += free.numel()
        mrows = model_rows(free, group)
        pre = [prefixes[r] for i in ids for r in range(i * group, (i + 1) * group)]
        target = cache if first_admission else model.new_cache(len(pre), cache.capacity)
        row_seeds = queue[ids]
        first = engine.prefill(pre, target, row_seeds)
        if target is not cache:
            cache.assign(mrows, target)
        fresh = torch.zeros(fl.seq.shape[0], dtype=torch.bool, device=dev)
        fresh[free] = True
        fl.seq[free] = torch.tensor(ids, device=dev)
        fl.committed[free] = 1
        fl.base[mrows] = torch.tensor([len(x) for x in pre], device=dev)
        fl.seeds[free], fl.iteration[free] = row_seeds, 0
        fl.when[free] = -1
        fl.when[free, 0] = 0
        fl.live &= ~fresh
        sched.admit(fl, fresh, first, cache)
        engine.parts.drafter.reset(fresh)
        stats.admit(ids)
        if on_progress:
            on_progress(len(ids))

    admit()
    running = fl.committed < length
    while True:
        step = engine.step(fl, cache, running)
        fl.committed = fl.committed + step
        fl.live = running
        fl.when = torch.where(sched.settled(fl) & (fl.when < 0), fl.iteration[:, None], fl.when)
        stats.record(fl.seq, step, running, *sched.tally)
        was, running = running, fl.committed < length
        done = was & ~running
        if on_progress:  # the one host read of the iteration
            n_done, n_tokens = torch.stack([done.sum(), step.sum()]).tolist()
            on_progress(n_tokens)
        else:
            n_done = int(done.sum())
        if n_done:
            out[fl.seq[done]] = fl.board[done, :length]
            when[fl.seq[done]] = fl.when[done]
            fl.seq = torch.where(done, -1, fl.seq)
            if admitted < total:
                admit()
                running = fl.committed < length
            n_running = int(running.sum())
            if not n_running:
                break
            if admitted == total and 4 * (fl.seq.shape[0] - n_running) >= fl.seq.shape[0]:
                rows = (fl.committed < length).nonzero().flatten()  # nothing waits: drop done rows
                fl.select(rows, model_rows(rows, group))
                sched.select(rows)
                cache.select(model_rows(rows, group))
                engine.parts.drafter.select(rows)
                running = running[rows]

    stats.finish(nfe=engine.nfe, wall=time.perf_counter() - t_start, forward=engine.measured_forward_time)
    stats.capture_time = engine.capture_time - capture_before
    stats.when = when.cpu()
    return out, stats


def _empty_flight(rows: int, group: int, width: int, length: int, device) -> Flight:
    """``rows`` free rows, counted as finished (``committed = length``)."""

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
    )
