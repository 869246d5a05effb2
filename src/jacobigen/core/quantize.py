"""Weight-only quantization of a model's linear layers through torchao (``--quantize int8|int4``).

``int8``: one int8 weight per entry and a float32 scale per output row (torchao's
``Int8WeightOnlyConfig``); activations stay at the model's dtype. ``int4``: 4-bit weights in groups of
128 with a bf16 scale and zero per group (``Int4WeightOnlyConfig(group_size=128)``, as Lumina-mGPT 2.0
quantizes), on torchao's tile-packed CUDA kernel, so only on a CUDA device and in bf16. Every
``nn.Linear`` of the model is quantized (attention, MLP, the output head and a family's own image
head), except an output head tied to the input embedding; embeddings, norms and the VQ decoder keep
their dtype.

The quantized model *is* the target: its logits differ from the full-precision model's by the
quantization error, and every lossless method samples exactly the quantized model's AR distribution
(the exactness tests run on a quantized model too). Quantizing is in place and idempotent for one
mode; :func:`quantized_as` reads the mode back from the weights.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable

import torch
from torch import nn

from ..core.contract import default_device
from ..core.errors import ConfigError

MODES = ("int8", "int4")
INT4_GROUP = 128  # weights per int4 scale/zero group (Lumina-mGPT 2.0's choice)
INSTALL = 'weight quantization needs torchao: pip install -e ".[quant]"'


@contextlib.contextmanager
def quiet_torchao():
    """torchao's import logs a warning per optional kernel library this build lacks (CUDA-only .so
    files on a CPU machine) and torch one about its enum registration: noise, not news. transformers
    imports torchao too when it is installed (its quantizers), so the family loaders run under this."""
    loggers = [logging.getLogger(n) for n in ("torchao", "torch.utils._pytree")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@contextlib.contextmanager
def _quiet():
    """:func:`quiet_torchao`, and torchao's own warnings while it quantizes."""
    with quiet_torchao(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def torchao():
    """The torchao quantization module, or a ConfigError saying how to install it."""
    try:
        with _quiet():
            from torchao import quantization
    except ImportError:
        raise ConfigError(INSTALL) from None
    return quantization


def check_mode(mode: str | None, device: str | torch.device | None = None) -> str | None:
    """``mode`` checked against what this device can run (None: no quantization), before any
    weight loads: an unknown mode, int4 off CUDA, or torchao missing is a ConfigError. ``device``
    None is the device a model loads on when none is named (CUDA when available)."""
    if mode is None:
        return None
    if mode not in MODES:
        raise ConfigError(f"quantize must be one of {', '.join(MODES)} (or None), got {mode!r}")
    kind = torch.device(device if device is not None else default_device()).type
    if mode == "int4" and kind != "cuda":
        raise ConfigError(
            f"--quantize int4 needs a CUDA device: torchao's int4 weight-only kernel (group size {INT4_GROUP}, "
            f"tile-packed, bf16) has no {kind} implementation; on {kind} use --quantize int8"
        )
    torchao()
    return mode


def _config(mode: str):
    q = torchao()
    if mode == "int8":
        return q.Int8WeightOnlyConfig()
    return q.Int4WeightOnlyConfig(group_size=INT4_GROUP, int4_packing_format="tile_packed_to_4d")


def quantizable(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """(name, layer) of every linear layer quantization replaces the weight of: all of them but a
    head whose weight is an embedding's (tied; quantizing it would untie and hold it twice)."""
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear) and id(m.weight) not in embedded]


def quantized_as(model) -> str | None:
    """The mode a model's linear weights are quantized in (None: plain weights)."""
    module = model if isinstance(model, nn.Module) else getattr(model, "model", None)
    if not isinstance(module, nn.Module):
        return None
    for _, layer in quantizable(module):
        name = type(layer.weight).__name__
        if name.startswith("Int8"):
            return "int8"
        if name.startswith("Int4"):
            return "int4"
    return None


def quantize_model(model: nn.Module, mode: str | None) -> nn.Module:
    """``model`` with its linear weights quantized to ``mode`` in place (None: unchanged). Quantizing a
    model again in its own mode is a no-op; in another one a ConfigError (the full-precision weights
    are gone). int4 runs in bf16: a model in another dtype is cast to bf16 first."""
    if mode is None:
        return model
    if not isinstance(model, nn.Module):
        raise ConfigError(f"only a torch module's weights can be quantized, got {type(model).__name__}")
    device = next(model.parameters()).device
    check_mode(mode, device)
    done = quantized_as(model)
    if done not in (None, mode):
        raise ConfigError(f"this model is already quantized to {done}; load it again to quantize it to {mode}")
    if mode == "int4" and next(model.parameters()).dtype != torch.bfloat16:
        model.to(torch.bfloat16)
    for _, layer in quantizable(model):  # those a streaming load left (a family's image head), or all
        if quantized_as(layer) is None:
            quantize_linear(layer, mode)
    return model


ROWS = 4096  # output rows quantized at a time (int8): the float32 temporaries stay ~64 MB at width 4096


def quantize_linear(layer: nn.Linear, mode: str) -> nn.Linear:
    """One linear layer's weight quantized in place, as a streaming load does right after filling it
    (int8: :func:`int8_rows` over the weight's rows)."""
    with _quiet(), torch.no_grad():
        if mode != "int8":
            torchao().quantize_(layer, _config(mode))
            return layer
        w = layer.weight
        layer.weight = nn.Parameter(int8_rows(lambda a, b: w[a:b], (w.shape[0], w.shape[1])), requires_grad=False)
    return layer


def int8_rows(rows: Callable[[int, int], torch.Tensor], shape: tuple[int, int]) -> torch.Tensor:
    """torchao's int8 weight (``Int8WeightOnlyConfig``) of an [out, in] weight whose rows ``rows(start,
    stop)`` gives at full precision, ``ROWS`` at a time, into one preallocated Int8Tensor. Its scales
    are per row, so the result is torchao's whole-tensor one; but neither the float32 temporaries of
    ``Int8Tensor.from_hp`` (about 4x the bf16 weight at once) nor, when ``rows`` reads a file, the
    full-precision weight itself are ever held beyond a chunk."""
    from torchao.quantization import Int8Tensor

    granularity = _config("int8").granularity
    parts: dict[str, torch.Tensor] = {}
    meta: dict = {}
    dtype = None
    with _quiet(), torch.no_grad():
        for start in range(0, shape[0], ROWS):
            chunk = rows(start, min(start + ROWS, shape[0]))
            q = Int8Tensor.from_hp(chunk, granularity=granularity)
            names, meta = q.__tensor_flatten__()
            dtype = chunk.dtype
            for name in names:
                inner = getattr(q, name)
                if name not in parts:
                    parts[name] = inner.new_empty((shape[0], *inner.shape[1:]))
                parts[name][start : start + inner.shape[0]] = inner
        meta = {**meta, "block_size": [1, shape[1]], "dtype": dtype}
        return Int8Tensor.__tensor_unflatten__(parts, meta, torch.Size(shape), None)


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor holds, a torchao quantized tensor's inner tensors counted (not its logical size)."""
    if hasattr(t, "__tensor_flatten__"):  # a tensor subclass: its stored parts
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def weight_bytes(model) -> int:
    """Bytes of a model's parameters and buffers as stored (each shared tensor once)."""
    module = model if isinstance(model, nn.Module) else getattr(model, "model", None)
    if not isinstance(module, nn.Module):
        return 0
    seen, total = set(), 0
    for t in (*module.parameters(), *module.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += tensor_bytes(t)
    return total
