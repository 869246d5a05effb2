"""What the CPU computes natively: the embedded models' default dtype follows it
(:func:`jacobigen.models.load.default_dtype`), and every benchmark records it."""

from __future__ import annotations

import functools


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.cache
def native_bf16() -> bool:
    """Whether the CPU computes bfloat16 dot products natively (AVX512-BF16 or AMX tiles): there a block
    of tokens costs much less against a single one in bfloat16 than in float32 (docs/results.md)."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})
