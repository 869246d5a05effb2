"""Batch- and block-invariant kernels: a row's output never depends on which rows share its matmul,
nor a query's attention on how many queries share its block or how many cache slots lie behind it.

A shared forward runs every sequence of a batch through one matrix product per layer. Matrix
kernels pick their blocking, and with it the order of each dot product's additions, by the row
count M, so a row's float output may differ by one rounding between M = 2 (alone) and M = 32
(batched); a draw that lands within that rounding of a boundary then differs. Everything else in
the forward (norms, RoPE, attention per row and head) already treats each row alone.

This module finds, per weight shape, the cheapest way this machine's kernel is row-invariant, by
measuring it once (:func:`plan`):

- ``floor``: from some row count F on, a row's output no longer depends on M nor on the row's
  place (an AMD EPYC with torch 2.13's CPU kernel: F = 4; a matrix-vector path serves M = 1 and
  another one M = 2-3). Fewer rows are padded to F; more run as they are. Nearly free.
- ``chunks``: otherwise the rows run in fixed chunks of ``CHUNK`` (the last one padded), so the
  kernel always sees one shape; used when a row's output there does not depend on its place.
- neither: None, and the caller runs each sequence on its own (the per-sequence fallback).

:func:`install` gives a model's linear layers a forward that follows the plan inside
:func:`row_invariant_kernels`. The probe compares rows computed at many row counts and offsets with
the same rows in one large product, bit for bit. It is evidence, not proof: a kernel could switch
paths at a count it did not try; the batch-invariance tests decode every preset alone and batched
on top of it.

Attention (:func:`attention`) has a second dependence: torch's fused CPU kernel splits the queries
and the keys into blocks by their counts, so a query's output changed (float32 and bfloat16, torch
2.13, AMD EPYC) with the number of queries in its call (1-3 against 4 or more, and 33 against 32)
and with the cache's capacity, masked slots included. A Jacobi block and ``ar``'s single token then
see the same prefix through different sums. Inside :func:`row_invariant_kernels` attention runs by
:func:`attention`: keys padded to a multiple of ``KEYS`` and queries in calls of a measured shape.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

FLOORS = (1, 2, 4, 8, 16)
CHUNK = 32
# (rows, offset) probes: both sides of the usual blocking thresholds, and odd places
_PROBES = ((1, 0), (1, 5), (2, 0), (2, 9), (3, 1), (4, 0), (4, 6), (5, 2), (7, 3), (8, 0), (9, 11), (15, 4),
           (16, 0), (17, 1), (31, 2), (32, 0), (33, 7), (63, 1), (64, 0), (65, 3), (127, 0), (129, 5),
           (255, 1), (257, 0), (300, 11))  # fmt: skip
_ROWS = 320


@dataclass(frozen=True)
class Plan:
    """How a weight's products stay row-invariant: pad to ``floor`` rows, or run ``chunk``-row chunks."""

    floor: int | None = None
    chunk: int | None = None

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        m = rows.shape[0]
        step = self.floor or self.chunk
        assert step is not None
        pad = step - m if self.floor else -m % step
        if pad > 0:
            rows = torch.cat([rows, rows.new_zeros(pad, rows.shape[1])])
        if self.floor:
            out = F.linear(rows, weight, bias)
        else:
            out = torch.cat([F.linear(c, weight, bias) for c in rows.split(step)])
        return out[:m].view(*x.shape[:-1], weight.shape[0])


_plans: dict[tuple, Plan | None] = {}
_lock = threading.Lock()


def plan(weight: torch.Tensor) -> Plan | None:
    """This machine's row-invariant way to multiply by ``weight`` (measured once per shape, dtype,
    tensor type, device and thread count); None when neither a floor nor fixed chunks keep rows invariant."""
    # the weight's type too: a quantized weight (a torchao tensor subclass) runs another kernel
    key = (tuple(weight.shape), weight.dtype, type(weight), weight.device, torch.get_num_threads())
    if key in _plans:
        return _plans[key]
    with _lock:
        if key not in _plans:
            _plans[key] = _measure(weight)
        return _plans[key]


def _measure(weight: torch.Tensor) -> Plan | None:
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(_ROWS, weight.shape[1], generator=gen).to(weight.device, weight.dtype)
    with torch.inference_mode():
        full = F.linear(x, weight)
        for floor in FLOORS:
            if all(_same(Plan(floor=floor), x, weight, full, m, at) for m, at in _PROBES):
                return Plan(floor=floor)
        chunked = Plan(chunk=CHUNK)
        full = chunked(x, weight, None)
        if all(_same(chunked, x, weight, full, m, at) for m, at in _PROBES):
            return chunked
    return None


def _same(p: Plan, x, weight, full, m: int, at: int) -> bool:
    return torch.equal(p(x[at : at + m], weight, None), full[at : at + m])


_active = threading.local()

QUERIES = 32  # queries per attention call: the fused kernel's own query block below 192 queries
KEYS = 512  # keys are padded to a multiple of this: its key block from 512 keys on


def active() -> bool:
    """Whether this thread is inside :func:`row_invariant_kernels`."""
    return getattr(_active, "on", False)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
    """``scaled_dot_product_attention`` of q [R, H, T, D] over k, v [R, H, C, D] with the additive
    ``attn_mask`` [R, 1, T, C], in calls of one shape whatever T and C: keys padded to a multiple of
    ``KEYS`` (masked: a fully masked key block adds exact zeros), queries in calls of at most
    ``QUERIES``, each padded to this machine's :func:`query_floor`. A query's output is then the same
    bits alone, in any block and behind any capacity. A padded query sees every slot (a row of -inf
    only would be NaN), and is dropped."""
    c, mask = k.shape[-2], attn_mask
    if c % KEYS:
        k, v = F.pad(k, (0, 0, 0, -c % KEYS)), F.pad(v, (0, 0, 0, -c % KEYS))
        mask = F.pad(mask, (0, -c % KEYS), value=float("-inf"))
    floor = query_floor(q.dtype, q.shape[-1], q.device)
    out = []
    for a, m in zip(q.split(QUERIES, -2), mask.split(QUERIES, -2), strict=True):
        n = a.shape[-2]
        if n < floor:
            a, m = F.pad(a, (0, 0, 0, floor - n)), F.pad(m, (0, 0, 0, floor - n))
        out.append(F.scaled_dot_product_attention(a, k, v, attn_mask=m)[..., :n, :])
    return torch.cat(out, -2) if len(out) > 1 else out[0]


_floors: dict[tuple, int] = {}


def query_floor(dtype: torch.dtype, head_dim: int, device: torch.device) -> int:
    """The fewest queries per attention call from which a query's output no longer depends on how
    many share the call (measured once per dtype, head size, device and thread count, as
    :func:`plan` measures the linear layers): 4 on an AMD EPYC in float32 and bfloat16.
    ``QUERIES`` (every call one shape) when no smaller floor holds."""
    key = (dtype, head_dim, device, torch.get_num_threads())
    if key not in _floors:
        with _lock:
            if key not in _floors:
                _floors[key] = _measure_floor(dtype, head_dim, device)
    return _floors[key]


def _measure_floor(dtype: torch.dtype, head_dim: int, device: torch.device) -> int:
    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(2, 8, n, head_dim, generator=gen).to(device, dtype) for n in (QUERIES, KEYS, KEYS))
    queries = torch.arange(QUERIES, device=device)[:, None]
    with torch.inference_mode():
        for floor in (1, 2, 4, 8, 16):
            # a difference can hang on the values (bfloat16: 1 query of 8 heads behind 300 keys, not 256)
            if all(_same_queries(q, k, v, queries + seen, floor) for seen in (5, 100, 256, 300, 450)):
                return floor
    return QUERIES


def _same_queries(q, k, v, seen: torch.Tensor, floor: int) -> bool:
    visible = torch.arange(KEYS, device=q.device) < seen
    mask = torch.where(visible, 0.0, float("-inf")).to(q.dtype).expand(q.shape[0], 1, -1, -1)
    full = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for n, at in _PROBES:
        m = max(n, floor)
        if at + m <= QUERIES:
            part = F.scaled_dot_product_attention(q[:, :, at : at + m], k, v, attn_mask=mask[:, :, at : at + m])
            if not torch.equal(part[:, :, :n], full[:, :, at : at + n]):
                return False
    return True


@contextmanager
def row_invariant_kernels() -> Iterator[None]:
    """Inside it, every linear layer of a model prepared by :func:`install` runs by its weight's
    :func:`plan` (in this thread); outside it they are plain ``nn.Linear`` layers."""
    before = getattr(_active, "on", False)
    _active.on = True
    try:
        yield
    finally:
        _active.on = before


def install(model) -> bool:
    """Prepare ``model``'s ``nn.Linear`` layers (of the module it wraps, for a wrapper such as
    :class:`jacobigen.decode.capture.Graphed`) for :func:`row_invariant_kernels`: each gets its
    plan for this machine and thread count, and a forward that checks one thread-local flag (a
    TorchFunctionMode would route every op of the forward through Python; a plan looked up in the
    forward would stop a compiled step's trace). Call it again after changing torch's threads.
    Returns whether every layer has a plan (False: a shared forward cannot be made batch-invariant
    here)."""
    layers = _linears(model)
    plans = [plan(layer.weight) for layer in layers]
    for layer, p in zip(layers, plans, strict=True):
        layer._jacobigen_plan = p  # type: ignore[assignment]  # a plain attribute, not a submodule
        if "forward" not in vars(layer):
            layer.forward = types.MethodType(_forward, layer)  # type: ignore[method-assign]
    return all(p is not None for p in plans)


def _forward(layer: torch.nn.Linear, input: torch.Tensor) -> torch.Tensor:
    if active():
        p: Plan | None = layer._jacobigen_plan  # type: ignore[assignment]
        if p is None:
            raise RuntimeError(
                f"no row-invariant way to multiply by a {tuple(layer.weight.shape)} {layer.weight.dtype} weight "
                "on this machine: use deterministic='per-sequence'"
            )
        return p(input, layer.weight, layer.bias)
    return F.linear(input, layer.weight, layer.bias)


def _linears(model) -> list[torch.nn.Linear]:
    module = model if isinstance(model, torch.nn.Module) else getattr(model, "model", None)
    if not isinstance(module, torch.nn.Module):
        return []
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
