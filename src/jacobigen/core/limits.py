"""Sizes checked before anything is allocated: a decode's working set against the memory that is
free, so that a hostile window or batch is a message with the numbers in it, not a failed
allocation of hundreds of gigabytes (or a machine brought to its knees) halfway through a run."""

from __future__ import annotations

import torch

from .errors import ConfigError

BUDGET = 0.5  # share of the free memory a decode may plan to use
PER_SLOT = 12  # [slots, V] float buffers a row keeps (targets, drafts' q, history, logits)


def free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device`` (CUDA: the driver's count; CPU: MemAvailable), None if unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def cache_bytes_per_slot(model) -> int:
    """Bytes one cache slot of one model row takes (a probe cache of one slot, measured)."""
    probe = model.new_cache(1, 1)
    return sum(t.numel() * t.element_size() for t in (*getattr(probe, "keys", []), *getattr(probe, "values", [])))


def size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def batch_that_fits(
    model, device: torch.device, rows: int, batch_size: int | None, group: int, capacity: int, slots: int, window: int
) -> int:
    """The batch to decode: ``batch_size`` (default: all ``rows``, or as many as fit), checked
    against ``BUDGET`` of the free memory. A sequence holds ``group`` model rows of ``capacity``
    cache slots and ``PER_SLOT`` buffers of [``slots`` + 1, vocab] floats."""
    per_row = group * capacity * cache_bytes_per_slot(model) + PER_SLOT * (slots + 1) * model.vocab_size * 4
    want = min(batch_size or rows, rows)
    free = free_memory(device)
    if free is None:
        return want
    fits = int(BUDGET * free // per_row)
    if batch_size is None and fits >= 1:
        return min(want, fits)
    if want > fits:
        raise ConfigError(
            f"a batch of {want} sequence(s) at window {window} needs about {size(want * per_row)} "
            f"({size(per_row)} each) but {size(free)} is free on {device} and a decode plans on at most "
            f"{BUDGET:.0%} of it: lower the batch size or the window"
        )
    return want
