"""The streaming load (docs/DESIGN.md §9): a model built on the meta device in its target dtype, then
filled tensor by tensor from the checkpoint's files, each tensor converted (renamed, fused into its
slice of q/k/v or gate/up), cast and, with ``quantize``, each linear layer quantized right after it is
filled. The host never holds more than the final model plus the largest tensor in flight: no second
full-precision copy, as vLLM's and transformers' loaders do it.

:class:`Checkpoint` reads a safetensors folder (``model.safetensors.index.json`` and its shards, or one
``model.safetensors``) itself: the format is a JSON header and raw little-endian tensors.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

from ...core.errors import WeightsError
from ..transformer import NameMap, Transformer, TransformerConfig, _names, check_finite

Fix = Callable[[str, torch.Tensor], torch.Tensor]  # (our key, tensor) -> the tensor our layer takes (not linears)


DTYPES = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64, "I64": torch.int64,
    "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}  # fmt: skip
FINITE_CHUNK = 1 << 20  # elements checked for NaN/inf at a time


class Checkpoint:
    """The tensors of a safetensors checkpoint folder by name, each read from its shard straight into
    the tensor that keeps it (``readinto``): no memory map and no staging buffer is ever resident beside
    it (safetensors' ``get_tensor`` holds about three times the tensor at once)."""

    def __init__(self, path: Path):
        self.path = path
        index = path / "model.safetensors.index.json"
        try:
            if index.is_file():
                self.where = dict(json.loads(index.read_text())["weight_map"])
            else:
                self.where = dict.fromkeys(self._header("model.safetensors")[0], "model.safetensors")
        except WeightsError:
            raise
        except Exception as e:  # a broken index
            raise WeightsError(f"cannot read the safetensors index in {path}: {e}") from e
        self.headers: dict[str, tuple[dict, int]] = {}

    def _header(self, shard: str) -> tuple[dict, int]:
        """(tensor entries, offset of the data) of one shard file."""
        file = self.path / shard
        try:
            with open(file, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
        except Exception as e:  # a missing or truncated shard
            raise WeightsError(f"cannot read the safetensors header of {file}: {e}") from e
        header.pop("__metadata__", None)
        return header, 8 + n

    def __contains__(self, key: str) -> bool:
        return key in self.where

    def __iter__(self) -> Iterator[str]:
        return iter(self.where)

    def entry(self, key: str, what: str = "the checkpoint") -> tuple[torch.dtype, tuple[int, ...]]:
        """(dtype, shape) of a stored tensor; a key the index lacks is a WeightsError naming ``what``."""
        if key not in self.where:
            raise WeightsError(f"{what} in {self.path} has no {key}: is it a checkpoint of this family and config?")
        shard = self.where[key]
        if shard not in self.headers:
            self.headers[shard] = self._header(shard)
        header = self.headers[shard][0]
        if key not in header or header[key]["dtype"] not in DTYPES:
            raise WeightsError(f"{self.path / shard} holds no {key} of a known dtype")
        return DTYPES[header[key]["dtype"]], tuple(header[key]["shape"])

    def read_into(self, key: str, out: torch.Tensor, rows: tuple[int, int] | None = None) -> torch.Tensor:
        """Tensor ``key`` (or its ``rows`` [start, stop)) into ``out`` (that shape, any dtype; read in
        place when dtypes agree)."""
        dtype, shape = self.entry(key)
        first, last = rows or (0, shape[0] if shape else 1)
        want = (last - first, *shape[1:]) if shape else shape
        if tuple(out.shape) != want:
            raise WeightsError(f"{key} has shape {shape} in {self.path}, the model needs {tuple(out.shape)}")
        dest = out if out.dtype == dtype and out.is_contiguous() and out.device.type == "cpu" else None
        target = dest if dest is not None else torch.empty(want, dtype=dtype)
        shard = self.where[key]
        header, start = self.headers[shard]
        row_bytes = math.prod(shape[1:]) * dtype.itemsize
        view = target.view(-1).view(torch.uint8).numpy() if target.numel() else None
        try:
            with open(self.path / shard, "rb") as f:
                f.seek(start + header[key]["data_offsets"][0] + first * row_bytes)
                if view is not None and f.readinto(view) != view.nbytes:
                    raise EOFError("the file ends inside the tensor")
        except Exception as e:  # a truncated shard
            raise WeightsError(f"cannot read {key} from {self.path / shard}: {e}") from e
        for chunk in target.view(-1).split(FINITE_CHUNK):  # a bool per element, a chunk at a time
            check_finite({key: chunk}, self.path)
        if dest is None:
            out.copy_(target)
        return out

    def read(self, key: str, what: str = "the checkpoint") -> torch.Tensor:
        """One tensor as stored."""
        dtype, shape = self.entry(key, what)
        return self.read_into(key, torch.empty(shape, dtype=dtype))


class Tensors:
    """A state dict of a ``.pt`` file loaded memory-mapped (``torch.load(..., mmap=True)``: a tensor's pages
    are read when it is used) behind :class:`Checkpoint`'s interface, so that :func:`fill` streams it
    the same way. ``prepare(their key, tensor)``: a family's re-layout of a stored tensor (one tensor
    at a time); :meth:`unused` names the keys no entry read, for a strict load."""

    def __init__(self, state: dict[str, torch.Tensor], path: Path, prepare: Fix | None = None):
        self.state, self.path, self.prepare = state, path, prepare
        self.used: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self.state

    def __iter__(self) -> Iterator[str]:
        return iter(self.state)

    def entry(self, key: str, what: str = "the checkpoint") -> tuple[torch.dtype, tuple[int, ...]]:
        t = self.state.get(key)
        if not isinstance(t, torch.Tensor):
            raise WeightsError(f"{what} {self.path} has no tensor {key}: is it a checkpoint of this family and config?")
        return t.dtype, tuple(t.shape)

    def _get(self, key: str) -> torch.Tensor:
        self.entry(key)
        self.used.add(key)
        return self.prepare(key, self.state[key]) if self.prepare else self.state[key]

    def read(self, key: str, what: str = "the checkpoint") -> torch.Tensor:
        t = self._get(key)
        for chunk in t.reshape(-1).split(FINITE_CHUNK):
            check_finite({key: chunk}, self.path)
        return t

    def read_into(self, key: str, out: torch.Tensor, rows: tuple[int, int] | None = None) -> torch.Tensor:
        t = self._get(key)
        t = t[rows[0] : rows[1]] if rows else t
        if tuple(out.shape) != tuple(t.shape):
            raise WeightsError(f"{key} has shape {tuple(t.shape)} in {self.path}, the model needs {tuple(out.shape)}")
        for chunk in t.reshape(-1).split(FINITE_CHUNK):
            check_finite({key: chunk}, self.path)
        return out.copy_(t)

    def unused(self) -> list[str]:
        return [k for k in self.state if k not in self.used]


def place(model: nn.Module, key: str, tensor: torch.Tensor, shape: torch.Size, theirs: str | None = None) -> None:
    """Set parameter ``key`` of ``model`` (on the meta device until now) to ``tensor`` (``theirs``: its
    name in the checkpoint, for the error)."""
    if tensor.shape != shape:
        name = theirs or key
        raise WeightsError(f"{name} has shape {tuple(tensor.shape)} in the checkpoint, the config needs {tuple(shape)}")
    owner, _, name = key.rpartition(".")
    module = model.get_submodule(owner)
    module._parameters[name] = nn.Parameter(tensor, requires_grad=False)


def fill(
    model: nn.Module,
    entries: list[tuple[str, str | tuple[str, ...]]],
    source: Checkpoint,
    dtype: torch.dtype,
    device: str | torch.device,
    quantize: str | None = None,
    fix: Fix | None = None,
) -> None:
    """Fill ``model``'s meta parameters: each ``(our key, their key or keys)`` read, fused (several keys:
    stacked row-wise into one tensor allocated once), fixed, cast, placed, and its linear layer quantized."""
    from ...core.quantize import int8_rows, quantize_linear, quantized_as

    params = dict(model.named_parameters())
    for key, theirs in entries:
        shape = params[key].shape
        owner = model.get_submodule(key.rpartition(".")[0])
        linear = isinstance(owner, nn.Linear) and key.endswith("weight")
        if isinstance(theirs, tuple):
            out = torch.empty(shape, dtype=dtype, device=device)
            start = 0
            for part in theirs:
                n = source.entry(part)[1][0]
                if start + n > shape[0]:
                    raise WeightsError(f"{', '.join(theirs)} stack to more than the {shape[0]} rows of {key}")
                source.read_into(part, out[start : start + n])
                start += n
            if start != shape[0]:
                raise WeightsError(f"{', '.join(theirs)} stack to {start} rows, {key} needs {shape[0]}")
        elif quantize == "int8" and linear:  # quantized as its rows are read: never whole at full precision

            def rows(a: int, b: int, name: str = theirs, width: int = shape[1]) -> torch.Tensor:
                return source.read_into(name, torch.empty(b - a, width, dtype=dtype), (a, b)).to(device)

            out = int8_rows(rows, tuple(shape))
        else:
            out = source.read(theirs)
            out = (fix(key, out) if fix else out).to(device=device, dtype=dtype)
        place(model, key, out, shape, theirs if isinstance(theirs, str) else None)
        if quantize and linear and quantized_as(owner) is None:
            quantize_linear(owner, quantize)


def stream_decoder(
    cfg: TransformerConfig,
    names: NameMap,
    source: Checkpoint,
    dtype: torch.dtype,
    device: str | torch.device,
    quantize: str | None = None,
    fix: Fix | None = None,
) -> Transformer:
    """Our decoder of ``cfg`` filled from ``source`` through ``names`` (see :mod:`.convert`); a tied
    head (``cfg.tie_embeddings``) is the embedding, unquantized, and its name map entry is not read."""
    with torch.device("meta"):
        model = Transformer(cfg)
    entries = [(key, theirs) for _, key, theirs in _names(names, cfg.n_layers)]
    if cfg.tie_embeddings:
        entries = [(k, t) for k, t in entries if k != "head.weight"]
    fill(model, entries, source, dtype, device, quantize, fix)
    if cfg.tie_embeddings:
        model.head.weight = model.embed.weight
    return model.eval()


def stream_module(
    module: nn.Module, prefix: str, source: Checkpoint, dtype: torch.dtype, device: str | torch.device
) -> nn.Module:
    """A module built on the meta device (a family's small image parts) with every parameter and
    persistent buffer read from ``source`` under ``prefix``, cast to ``dtype`` (integer buffers kept)."""
    fill(module, [(k, prefix + k) for k, _ in module.named_parameters()], source, dtype, device)
    for key, _ in list(module.named_buffers()):
        owner, _, name = key.rpartition(".")
        sub = module.get_submodule(owner)
        if name in sub._non_persistent_buffers_set:
            raise WeightsError(f"{prefix}{key} is not stored in checkpoints and cannot be streamed")
        t = source.read(prefix + key)
        sub._buffers[name] = t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)
    return module.eval()
