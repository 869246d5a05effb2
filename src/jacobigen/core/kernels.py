"""Ops that a compiled step runs as their eager kernels (registered as torch custom ops).

A compiled graph may generate its own code for a scan; for the long float64 cumsum of inverse-CDF
sampling over a 65,536-id vocabulary, inductor's generated CUDA scan fails to build (torch 2.11,
an H200), and where a generated scan builds it may still round differently from ATen's. Sampling
decides tokens, so a compiled step calls the same kernel as eager: tokens stay identical.
"""

from __future__ import annotations

import torch


@torch.library.custom_op("jacobigen::cumsum", mutates_args=())
def _cumsum(x: torch.Tensor) -> torch.Tensor:
    return x.cumsum(-1)


@_cumsum.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def cumsum(x: torch.Tensor) -> torch.Tensor:
    """``x.cumsum(-1)``, as ATen computes it, also inside a compiled graph."""
    return _cumsum(x) if torch.compiler.is_compiling() else x.cumsum(-1)
