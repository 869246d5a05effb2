"""What a forward pass costs on this device, and the window that makes a method fastest here.

On 2 CPU cores a 32-token forward costs a few single-token forwards; on a GPU about one. So the
window that maximises tokens per second differs per device and per method: the method decides how
many tokens an iteration commits, the device what a block of that size costs.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable

import torch

from ..core.contract import model_device, sync
from ..core.masks import block_mask, causal


def forward_cost_curve(
    model,
    sizes: list[int],
    context: int = 64,
    reps: int = 5,
    rows: int = 1,
    slots: Callable[[int], int] | None = None,
) -> dict[int, float]:
    """Median seconds of one forward over a block of each size after ``context`` cached tokens, for
    ``rows`` model rows (2 for a guided sequence: its cond/uncond pair), in a cache of
    ``slots(size)`` slots per row (default: just enough): attention reads every slot, so a decode's
    forward costs what its whole cache makes it cost. Each timed forward follows an untimed one of
    its size, as in a decode (after a larger block a single-token forward runs up to 20% slower). The
    sizes are timed in ``reps`` rounds, one of each per round, so that a burst of load on a shared
    machine (or a cold start) hits every size alike instead of one."""
    device = model_device(model)
    times: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(reps):
        for size in sizes:
            cache = model.new_cache(rows, max(slots(size) if slots else 0, context + size))
            tokens = torch.zeros(rows, size, dtype=torch.int64, device=device)
            positions = torch.arange(context, context + size, device=device).expand(rows, -1)
            cache.lengths += context
            mask = block_mask(cache.lengths, cache.capacity, causal(size, device))
            with torch.inference_mode():
                model(tokens, positions, mask, cache)  # untimed: it writes the block and commits nothing
                sync(device)
                t0 = time.perf_counter()
                model(tokens, positions, mask, cache)
                sync(device)
            times[size].append(time.perf_counter() - t0)
    return {size: statistics.median(t) for size, t in times.items()}


def interpolate(curve: dict[int, float], size: int) -> float:
    """Piecewise-linear cost of a block size from the measured curve (linear beyond its ends)."""
    xs = sorted(curve)
    if size <= xs[0]:
        return curve[xs[0]]
    for a, b in itertools.pairwise(xs):
        if size <= b:
            return curve[a] + (curve[b] - curve[a]) * (size - a) / (b - a)
    a, b = xs[-2], xs[-1]
    return curve[b] + (curve[b] - curve[a]) * (size - b) / (b - a)


def block_size(parts, layout) -> int:
    """Tokens in one forward of a method's window: the window (a tree is carved out of it), and for
    PJD one segment per row in flight, each its window plus its tree's nodes (at most; rows near
    the end of the image draft less)."""
    if parts.schedule is None:
        return parts.window
    extra = parts.tree.added(parts.window - 1)[1] if parts.tree else 0
    return parts.schedule.segments(layout.frames * layout.rows, layout.cols) * (parts.window + extra)
