"""What every real model family shares: the backend choice, the transformers adapter, offline loading.

Decoders call ``model(tokens, positions, mask, cache)`` with an additive float mask over all cache
slots (docs/DESIGN.md §5). The Llama-shaped families generate on our own decoder by default
(``backend="ours"``, converted by :mod:`.convert`): it compiles to one graph. ``backend="transformers"``
runs transformers' own modules instead, for comparison, through :class:`HFAdapter`: it embeds the
block itself, hands the decoder stack our 4-D mask and explicit ``position_ids`` (a 4-D mask is used
as given by ``create_causal_mask`` in transformers 5.x), and a :class:`BridgeCache` whose ``update``
writes into our ragged :class:`~jacobigen.core.cache.KVCache` and returns its full buffers.
"""

from __future__ import annotations

import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from ...core.cache import KVCache
from ...core.errors import ConfigError, WeightsError

BACKENDS = ("ours", "transformers")


def use_ours(backend: str) -> bool:
    """True for our decoder, False for transformers' modules; anything else is a ConfigError."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    return backend == "ours"


def require_dir(path: str | Path, what: str) -> Path:
    """Fail early, naming the path, instead of letting hub code try to download."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise WeightsError(
            f"{what} weights not found: {p} is not a directory "
            f"(download the checkpoint there first; jacobigen never downloads)"
        )
    return p


def offline() -> None:
    """Loading must never hang on the network: force the hub offline for this process."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load_hf(
    cls,
    path: Path,
    what: str,
    device: str,
    dtype: torch.dtype | None = None,
    repair: Callable[[nn.Module, Path, list[str]], None] | None = None,
    **kwargs,
):
    """``cls.from_pretrained(path)`` offline, with every failure reported as a WeightsError.
    ``repair(model, path, keys)``, when given, receives the keys whose checkpoint shape differs from
    the class's (a layout the family knows how to convert) and must fill them or raise."""
    offline()
    dtype = dtype or default_dtype(device)
    if repair is not None:
        kwargs.update(ignore_mismatched_sizes=True, output_loading_info=True)
    try:
        model = cls.from_pretrained(str(path), local_files_only=True, dtype=dtype, **kwargs)
    except Exception as e:  # missing shards, wrong architecture, corrupt files
        raise WeightsError(f"cannot load {what} weights from {path}: {e}") from e
    if repair is not None:
        model, info = model
        repair(model, path, [key for key, *_ in info["mismatched_keys"]])
    return model.to(device).eval()


def load_tokenizer(path: Path, what: str):
    offline()
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:
        raise WeightsError(f"cannot load the {what} tokenizer from {path}: {e}") from e


def default_dtype(device: str | torch.device) -> torch.dtype:
    """bfloat16 on every device: the families' checkpoints are released in it (a 7B at float32 needs 28 GB,
    more than most machines' memory); ``--dtype`` chooses another."""
    return torch.bfloat16


def token_id(tokenizer, token: str) -> int:
    """Id of a special token by name; a tokenizer without it is the wrong tokenizer."""
    i = tokenizer.convert_tokens_to_ids(token)
    if i is None or i == tokenizer.unk_token_id:
        raise WeightsError(f"tokenizer has no token {token!r}: is this the right model directory?")
    return int(i)


def contiguous_range(ids, what: str) -> tuple[int, int]:
    """The layout takes a half-open id range; check the family's image ids really form one."""
    ids = sorted(int(i) for i in ids)
    if not ids or ids[-1] - ids[0] + 1 != len(ids):
        raise ConfigError(f"{what} image token ids are not one contiguous range")
    return ids[0], ids[-1] + 1


def each_image(decode: Callable[[torch.Tensor], torch.Tensor], codes: torch.Tensor) -> torch.Tensor:
    """Pixels of a batch of code grids, decoded one image at a time: a pixel decoder's activations are
    large (4.6 GiB for one 768-px MoVQGAN image at float32, 20 GiB for Emu3's 720 px), and the memory
    plan counts one image's (``jacobigen.models.shapes.PIXEL_BYTES``)."""
    with torch.inference_mode():
        return torch.cat([decode(c[None]) for c in codes])


def to_pil(
    pixels: torch.Tensor, rounded: bool = False, value_range: tuple[float, float] = (-1.0, 1.0)
) -> list[Image.Image]:
    """VQ decoder output [B, 3, H, W] in ``value_range`` -> RGB images, converted as the family's own
    code does: scaled to [0, 255] and truncated (Chameleon, Lumina-mGPT, Anole, Janus and Emu3 cast
    to uint8), or rounded (``rounded``: LlamaGen's torchvision ``save_image`` adds 0.5 first)."""
    lo, hi = value_range
    x = ((pixels.float() - lo) / (hi - lo)).clamp(0, 1) * 255
    x = (x + 0.5 if rounded else x).floor().clamp(max=255).to(torch.uint8)
    return [Image.fromarray(np.ascontiguousarray(img.permute(1, 2, 0).cpu().numpy())) for img in x]


class UntrustedCheckpoint(WeightsError):
    """A checkpoint that pickles Python objects besides its tensors, read only with ``trust``."""


def mapped_bytes(path: Path, keep: Callable[[str], object]) -> int:
    """Bytes at float32 of the tensors of a pickled (Lightning) state dict whose keys ``keep`` accepts,
    read from the memory-mapped file: what a decoder loaded from it at float32 holds."""
    state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    state = state.get("state_dict", state)
    return sum(v.numel() * 4 for k, v in state.items() if keep(k))


def read_checkpoint(path: Path, what: str, trust: bool = False):
    """``torch.load`` of a pickled checkpoint. Tensors-only files load as is; a file that also pickles
    Python objects (LlamaGen's training scripts store their ``argparse.Namespace``) can run code
    when unpickled, so it loads only with ``trust`` (``--trust-checkpoint``)."""
    try:
        try:  # memory-mapped: a tensor is read when it is used, and what is not used never is
            return torch.load(str(path), map_location="cpu", weights_only=not trust, mmap=True)
        except RuntimeError as e:  # a file in torch's legacy (pre-zip) format cannot be mapped
            if "mmap" not in str(e):
                raise
            return torch.load(str(path), map_location="cpu", weights_only=not trust)
    except OSError as e:  # missing, a folder, no permission: the file itself may be fine
        raise WeightsError(f"cannot read {what} weights {path}: {e.strerror or e}") from e
    except Exception as e:
        found = re.search(r"GLOBAL ([\w.]+)", str(e)) if isinstance(e, pickle.UnpicklingError) else None
        if trust or found is None:  # not a trust question: torch's text would still suggest weights_only=False
            raise WeightsError(
                f"cannot read {what} weights {path}: not a readable PyTorch checkpoint (corrupt, truncated or "
                f"another format: {_unreadable(e)}); download it again"
            ) from e
        raise UntrustedCheckpoint(
            f"{path} pickles a Python object ({found.group(1)}) besides its tensors, as LlamaGen's training "
            f"scripts do with their arguments. Unpickling it could run code, so jacobigen reads only plain "
            f"tensors by default. If you trust this file, pass --trust-checkpoint (Python: "
            f"trust_checkpoint=True); or save its state dict alone once and load that."
        ) from None


def _unreadable(e: Exception) -> str:
    """What stopped ``torch.load``, in a few words (its unpickler's finding, or the first sentence)."""
    text = str(e)
    found = re.search(r"WeightsUnpickler error:\s*(.+)", text)
    first = found.group(1) if found else text.strip().split("\n")[0].split(". ")[0]
    if isinstance(e, EOFError):
        return "the file ends early"
    return f"{type(e).__name__}: {first[:160]}" if first else type(e).__name__


def bridge_cache_class():
    """Built lazily so that importing jacobigen never needs transformers."""
    from transformers import Cache

    class BridgeCache(Cache):
        """A ``transformers.Cache`` whose storage is our ragged static KVCache.

        ``update`` writes the block after each row's committed length and returns all slots, which
        is exactly what the 4-D mask from the decoder is laid out over. Length queries answer with
        the longest row; the models never need them because positions are always given.
        """

        def __init__(self, kv: KVCache):
            super().__init__(layers=[])
            self.kv = kv

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return self.kv.update(layer_idx, key_states, value_states)

        def get_seq_length(self, layer_idx: int = 0) -> int:
            return int(self.kv.lengths.max())

        def get_max_cache_shape(self, layer_idx: int = 0) -> int:
            return self.kv.capacity

        def __len__(self) -> int:
            return len(self.kv.keys)

    return BridgeCache


class HFAdapter(nn.Module):
    """A transformers decoder stack behind our model interface.

    ``backbone(inputs_embeds=, attention_mask=, position_ids=, cache=, use_cache=)`` must return
    ``last_hidden_state``; ``embed`` maps our token ids to input embeddings and ``head`` maps hidden
    states to logits over our id space (``vocab_size`` columns).
    """

    def __init__(
        self,
        hf_model: nn.Module,
        backbone: nn.Module,
        embed: Callable,
        head: Callable,
        text_config,
        vocab_size: int,
        max_seq_len: int,
    ):
        super().__init__()
        self.hf = hf_model
        self._backbone, self._embed, self._head = [backbone], embed, head  # not registered twice
        cfg = text_config
        self.n_layers = cfg.num_hidden_layers
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.vocab_size = vocab_size
        self.max_seq_len = max_seq_len
        self._bridge = bridge_cache_class()

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        p = next(self.parameters())
        return KVCache(self.n_layers, rows, self.kv_heads, capacity, self.head_dim, dtype=p.dtype, device=p.device)

    def forward(self, tokens, positions=None, mask=None, cache=None):
        if positions is None:
            positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        x = self._embed(tokens)
        if mask is None and cache is not None:
            raise ConfigError("a cached forward needs the 4-D mask over the cache slots")
        if mask is not None:
            mask = mask.to(x.dtype)
        out = self._backbone[0](
            inputs_embeds=x,
            attention_mask=mask,
            position_ids=positions,
            cache=self._bridge(cache) if cache is not None else None,
            use_cache=cache is not None,
        )
        return self._head(out.last_hidden_state).float()
