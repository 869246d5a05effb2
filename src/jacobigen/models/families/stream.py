"""The streaming load (docs/DESIGN.md §9): a model built on the meta device in its target dtype, then
filled tensor by tensor from the checkpoint's files, each tensor converted (renamed, fused into its
slice of q/k/v or gate/up), cast and, with ``quantize``, each linear layer quantized right after it is
filled. The host never holds more than the final model plus the largest tensor in flight: no second
full-precision copy, as vLLM's and transformers' loaders do it.

:class:`Checkpoint` reads a safetensors folder (``model.safetensors.index.json`` and its shards, or one
``model.safetensors``); each read opens the shard's memory map and closes it, so pages of the files
never stay resident beside the tensors made from them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

from ...core.errors import WeightsError
from ..transformer import NameMap, Transformer, TransformerConfig, _names, check_finite

Fix = Callable[[str, torch.Tensor], torch.Tensor]  # (our key, tensor) -> the tensor our layer takes


class Checkpoint:
    """The tensors of a safetensors checkpoint folder by name, read one at a time."""

    def __init__(self, path: Path):
        from safetensors import safe_open

        self.path, self.open = path, safe_open
        index = path / "model.safetensors.index.json"
        try:
            if index.is_file():
                self.where = dict(json.loads(index.read_text())["weight_map"])
            else:
                with safe_open(str(path / "model.safetensors"), framework="pt") as f:
                    self.where = {k: "model.safetensors" for k in f.keys()}
        except Exception as e:  # no weights, a broken index
            raise WeightsError(f"cannot read the safetensors index or weights in {path}: {e}") from e

    def __contains__(self, key: str) -> bool:
        return key in self.where

    def __iter__(self) -> Iterator[str]:
        return iter(self.where)

    def read(self, key: str, what: str = "the checkpoint") -> torch.Tensor:
        """One tensor as stored; a key the index lacks is a WeightsError naming ``what``."""
        if key not in self.where:
            raise WeightsError(f"{what} in {self.path} has no {key}: is it a checkpoint of this family and config?")
        try:
            with self.open(str(self.path / self.where[key]), framework="pt") as f:
                tensor = f.get_tensor(key)
        except Exception as e:  # a missing or truncated shard
            raise WeightsError(f"cannot read {key} from {self.path / self.where[key]}: {e}") from e
        check_finite({key: tensor}, self.path)
        return tensor


def place(model: nn.Module, key: str, tensor: torch.Tensor, shape: torch.Size) -> None:
    """Set parameter ``key`` of ``model`` (on the meta device until now) to ``tensor``."""
    if tensor.shape != shape:
        raise WeightsError(f"{key} has shape {tuple(tensor.shape)} in the checkpoint, the config needs {tuple(shape)}")
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
    from ...core.quantize import quantize_linear

    params = dict(model.named_parameters())
    for key, theirs in entries:
        shape = params[key].shape
        if isinstance(theirs, tuple):
            out = torch.empty(shape, dtype=dtype, device=device)
            start = 0
            for part in theirs:
                t = source.read(part)
                if start + t.shape[0] > shape[0] or t.shape[1:] != shape[1:]:
                    raise WeightsError(f"{part} of shape {tuple(t.shape)} does not fit {key} {tuple(shape)}")
                out[start : start + t.shape[0]].copy_(t)
                start += t.shape[0]
                del t
            if start != shape[0]:
                raise WeightsError(f"{', '.join(theirs)} stack to {start} rows, {key} needs {shape[0]}")
        else:
            out = source.read(theirs)
            out = (fix(key, out) if fix else out).to(device=device, dtype=dtype)
        place(model, key, out, shape)
        owner = model.get_submodule(key.rpartition(".")[0])
        if quantize and isinstance(owner, nn.Linear) and key.endswith("weight"):
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
