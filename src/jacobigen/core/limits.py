"""Sizes checked before anything is allocated: a decode's working set against the memory that is
free, so that a hostile window or batch is a message with the numbers in it, not a failed
allocation of hundreds of gigabytes (or a machine brought to its knees) halfway through a run."""

from __future__ import annotations

import math
import os
import re

import torch

from .errors import ConfigError

BUDGET = 0.5  # share of the free memory the default batch takes: room for the allocator as many rows churn
# the most of the free memory any decode plans on; the rest is for what the plan does not count: the
# allocator's slack, library workspaces, the image decoder's activations (docs/models.md, "The 10%")
LIMIT = 0.9
PER_SLOT = 12  # [slots, V] float buffers a row keeps (targets, drafts' q, history, logits)


MEMORY_ENV = "JACOBIGEN_DEVICE_MEMORY"  # bytes free to plan on, instead of the device's count (tests, shared machines)
UNITS = {"": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30, "t": 2**40, "tib": 2**40}
UNITS.update(kb=10**3, mb=10**6, gb=10**9, tb=10**12)
MAX_MEMORY = 2**64  # bytes: far past any machine, below what a count can hold


def memory_override() -> int | None:
    """``JACOBIGEN_DEVICE_MEMORY`` in bytes (``24GiB``, ``16G``, ``512MiB``, ``80e9``), None when unset."""
    text = os.environ.get(MEMORY_ENV, "").strip()
    if not text:
        return None
    found = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?)\s*([a-z]*)", text.lower())
    if not found or found.group(2) not in UNITS:
        raise ConfigError(f"{MEMORY_ENV}={text!r}: give bytes, optionally with a unit (KiB, MiB, GiB, GB), e.g. 24GiB")
    n = float(found.group(1)) * UNITS[found.group(2)]
    if not (math.isfinite(n) and n < MAX_MEMORY):
        raise ConfigError(f"{MEMORY_ENV}={text!r}: give at most {MAX_MEMORY:.3g} bytes (16 EiB), e.g. 24GiB")
    return int(n)


def free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device`` (CUDA: the driver's count; CPU: MemAvailable), None if unknown (a
    device this machine lacks: a plan made for another machine); ``JACOBIGEN_DEVICE_MEMORY`` replaces
    the count when set."""
    override = memory_override()
    if override is not None:
        return override
    if device.type == "cuda":
        present = torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count()
        return torch.cuda.mem_get_info(device)[0] if present else None
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
    """The batch to decode: ``batch_size``, checked against ``LIMIT`` of the free memory, or by
    default as many of ``rows`` as fit in ``BUDGET`` of it (at least one that fits in ``LIMIT``). A
    sequence holds ``group`` model rows of ``capacity`` cache slots and ``PER_SLOT`` buffers of
    [``slots`` + 1, vocab] floats."""
    per_row = group * capacity * cache_bytes_per_slot(model) + PER_SLOT * (slots + 1) * model.vocab_size * 4
    want = min(batch_size or rows, rows)
    free = free_memory(device)
    if free is None:
        return want
    budget, limit = (int(share * free // per_row) for share in (BUDGET, LIMIT))
    if batch_size is None and limit >= 1:
        return min(want, max(budget, 1))
    if want > limit:
        raise ConfigError(
            f"a batch of {want} sequence(s) at window {window} needs about {size(want * per_row)} "
            f"({size(per_row)} each) but {size(free)} is free on {device} and a decode plans on at most "
            f"{LIMIT:.0%} of it: lower the batch size or the window"
        )
    return want
