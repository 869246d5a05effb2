"""Lumina-mGPT (and Chameleon-format checkpoints): our decoder streams from the safetensors shards
(:mod:`.stream`), transformers' Chameleon config gives the image vocabulary; ``backend="transformers"``
loads transformers' whole model and runs its modules instead (see :mod:`.base`).

Lumina-mGPT's image format (Alpha-VLLM/Lumina-mGPT ``item_processor.py``): ``<racm3:break>``, two size
tokens ``<reserved{8800+n}>`` for the height and width in 32-pixel grids, then rows of 2n VQ tokens each
followed by ``<reserved08799>`` (EOL), then ``<eoss>`` (end of image). Image cells may only take the
``IMGIMG*`` ids of the vocabulary map. CFG follows Lumina's convention: the unconditional branch starts
at the image-start token, i.e. its prompt is the header alone.

``ChameleonForConditionalGeneration.forward`` masks image ids out of the logits (it is a text
generator), so both backends score with ``lm_head`` over the whole vocabulary. transformers ships no Chameleon
VQ *decoder*; the original VQGAN decoder (``vqgan.ckpt`` of Meta's Chameleon release, which Lumina-mGPT
also asks for) is loaded into a taming-style decoder from :mod:`.vq`. Anole (:mod:`.anole`) shares
everything here but the prompt and the token layout.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from ...core.errors import ConfigError, WeightsError
from ...core.layout import ImageLayout
from ..bundle import ModelBundle, palette_decode, rows_encoder
from ..transformer import TransformerConfig
from .base import (
    HFAdapter,
    contiguous_range,
    default_dtype,
    each_image,
    load_hf,
    load_tokenizer,
    offline,
    require_dir,
    to_pil,
    token_id,
    use_ours,
)
from .convert import HEAD, from_hf, per_head
from .stream import Checkpoint, stream_decoder

IMAGE_START, IMAGE_END, NEW_LINE = "<racm3:break>", "<eoss>", "<reserved08799>"
PROMPT = "Generate an image of {w}x{h} according to the following prompt:\n{text}"
TURN_END = "<reserved08706>"
PATCH = 32  # pixels per size-token grid; the VQ downsamples by 16, so 2 tokens per grid
DEFAULTS = {"cfg": 3.0, "top_k": 2000, "temperature": 1.0}
RELEASE_SIZES = (512, 768, 1024)  # Lumina-mGPT-7B-512 / -768 / -768-Omni / -1024, -34B-512
SHARD_NORM = re.compile(r"\.self_attn\.[qk]_norm\.(?:weight|bias)$")


def grid_token(n: int) -> str:
    return f"<reserved{8800 + n:05d}>"


def lumina_7b_config(max_seq_len: int = 10240) -> TransformerConfig:
    """Our decoder in the shape of Lumina-mGPT-7B (Chameleon-7B's: 32 layers of 4096 with 32 heads, MLP
    11008, 65536 ids, q/k norm, RoPE base 10000), for random-weight runs without transformers.
    ``max_seq_len``: a 1024-px image alone takes 64 * 65 + 1 tokens, past Chameleon's 4096."""
    return TransformerConfig(
        vocab_size=65536,
        dim=4096,
        n_layers=32,
        n_heads=32,
        ffn_dim=11008,
        max_seq_len=max_seq_len,
        rope_theta=10000.0,
        norm_eps=1e-5,
        qk_norm="chameleon",
    )


def chameleon_adapter(hf, backend: str = "ours", release: bool = False, backbone=None) -> nn.Module:
    """``hf``: a ChameleonForConditionalGeneration; logits keep the image ids (unlike its forward).
    ``release``: our decoder only, drop transformers' copy of the layers (see :func:`.convert.from_hf`).
    ``backbone``: our decoder already loaded (the streaming load; ``hf`` is then on the meta device)."""
    if use_ours(backend):
        return backbone if backbone is not None else from_hf(hf, release)
    cfg = hf.config
    return HFAdapter(hf, hf.model, hf.model.embed_tokens, hf.lm_head, cfg, cfg.vocab_size, cfg.max_position_embeddings)


def image_decoder(hf, vq_decoder) -> tuple[int, int, Callable]:
    """The ``IMGIMG*`` id range and grids [B, rows, cols] -> images through the VQGAN (token
    palettes without one)."""
    mapping = hf.model.vocabulary_mapping
    lo, hi = contiguous_range(mapping.image_tokens, "Chameleon")
    lut = torch.zeros(hi, dtype=torch.int64)
    for bpe, code in mapping.bpe2img.items():
        lut[bpe] = code

    def decode(grids: torch.Tensor, _=None):
        if vq_decoder is None:
            return palette_decode(grids, (lo, hi))
        return to_pil(each_image(vq_decoder.decode_codes, lut[grids.cpu()]))

    return lo, hi, decode


def chameleon_pipeline(
    hf, tokenizer, size: int = 768, vq_decoder=None, backend: str = "ours", release: bool = False, backbone=None
) -> ModelBundle:
    """The bundle for a ``size`` x ``size`` image (multiple of 32 pixels); ``backend``, ``release`` and
    ``backbone`` as in :func:`chameleon_adapter`."""
    if size % PATCH:
        raise ConfigError(f"Lumina-mGPT image sizes are multiples of {PATCH} pixels, got {size}")
    grids = size // PATCH
    lo, hi, decode = image_decoder(hf, vq_decoder)
    header = [
        token_id(tokenizer, IMAGE_START),
        token_id(tokenizer, grid_token(grids)),
        token_id(tokenizer, grid_token(grids)),
    ]
    layout = ImageLayout(
        2 * grids, 2 * grids, (lo, hi), eol_id=token_id(tokenizer, NEW_LINE), end_id=token_id(tokenizer, IMAGE_END)
    )

    def encode(text: str) -> list[int]:
        ids = tokenizer(PROMPT.format(w=size, h=size, text=text) + TURN_END)["input_ids"]
        return list(ids) + header

    note = "" if vq_decoder is not None else "no vqgan.ckpt found: images are token palettes"
    return ModelBundle(
        "chameleon",
        chameleon_adapter(hf, backend, release, backbone),
        layout,
        rows_encoder(encode, header),
        decode,
        dict(DEFAULTS),
        note=note,
    )


# --- loading ------------------------------------------------------------------------------------


def expand_shard_norms(model: nn.Module, path: Path, keys: list[str]) -> None:
    """Lumina-mGPT's Chameleon keeps the q/k-norm weight and bias per model-parallel shard
    ([model_parallel_size, head_dim]: [1, 128] for the 7B releases, 8 rows for 34B) and repeats each
    shard's row over its heads at run time (``repeat_interleave(heads // shards, 0)``); transformers'
    Chameleon holds one row per head. Repeating them here reproduces Lumina's normalisation exactly.
    Any other shape mismatch means the checkpoint is not a Chameleon of this config."""
    other = [k for k in keys if not SHARD_NORM.search(k)]
    if other:
        raise WeightsError(
            f"{path}: tensors whose shape does not fit the config, e.g. {other[:3]}: "
            "is this a Chameleon / Lumina-mGPT checkpoint with its own config.json?"
        )
    if not keys:
        return
    stored = read_tensors(path, keys)
    params = dict(model.named_parameters())
    for key in keys:
        target, rows = params[key], stored[key]
        if target.shape[0] % rows.shape[0] or rows.shape[1:] != target.shape[1:]:
            raise WeightsError(
                f"{path}: {key} has shape {tuple(rows.shape)}, which does not repeat to "
                f"{tuple(target.shape)} (heads x head_dim)"
            )
        with torch.no_grad():
            target.copy_(rows.repeat_interleave(target.shape[0] // rows.shape[0], 0))


def read_tensors(path: Path, keys: list[str]) -> dict[str, torch.Tensor]:
    """Named tensors of a transformers checkpoint directory (safetensors, sharded or not)."""
    from safetensors import safe_open

    index = path / "model.safetensors.index.json"
    where = json.loads(index.read_text())["weight_map"] if index.is_file() else {k: "model.safetensors" for k in keys}
    out = {}
    try:
        for key in keys:
            with safe_open(str(path / where[key]), framework="pt") as f:
                out[key] = f.get_tensor(key)
    except Exception as e:  # a missing shard or key, or a .bin checkpoint
        raise WeightsError(f"cannot read {keys[0]} from the safetensors files in {path}: {e}") from e
    return out


def size_from_name(path: Path) -> int | None:
    """The image side a release name states (``Lumina-mGPT-7B-512``, ``...-768-Omni``); checked on
    every folder of the path as given and as resolved, so a hub cache's
    ``models--Alpha-VLLM--Lumina-mGPT-7B-1024/snapshots/<hash>`` and a link to a release folder count."""
    for part in (*reversed(path.absolute().parts), *reversed(path.resolve().parts)):
        found = re.search(r"(?:^|[-_])(\d{3,4})(?:$|[-_])", part)
        if found and int(found.group(1)) in RELEASE_SIZES:
            return int(found.group(1))
    return None


def meta_chameleon(path: Path, what: str):
    """ChameleonForConditionalGeneration on the meta device: its config and image vocabulary mapping,
    no weights (the streaming load fills our decoder instead; the VQGAN decoder is :mod:`.vq`'s)."""
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    offline()
    try:
        config = ChameleonConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as e:
        raise WeightsError(f"cannot read the {what} config in {path}: {e}") from e
    with torch.device("meta"):
        return ChameleonForConditionalGeneration(config).eval()


def load_decoder(path: Path, dtype: torch.dtype, device: str | torch.device, quantize: str | None = None) -> nn.Module:
    """Our decoder streamed from a Chameleon-format folder (:mod:`.stream`), configured by the parser the
    memory plan uses; q/k norms stored per model-parallel shard are repeated over their heads."""
    from .chameleon_config import names, read_config

    if not (path / "config.json").is_file():
        raise WeightsError(f"{path} has no config.json: is it a Chameleon / Lumina-mGPT checkpoint folder?")
    source = Checkpoint(path)
    cfg = read_config(path)
    cfg = replace(cfg, tie_embeddings=cfg.tie_embeddings or HEAD not in source)

    def fix(key: str, t: torch.Tensor) -> torch.Tensor:
        if ".attn.q_norm." in key or ".attn.k_norm." in key:
            return per_head(t, cfg.n_heads if ".q_norm." in key else cfg.kv_heads, key)
        return t

    return stream_decoder(cfg, names(cfg), source, dtype, device, quantize, fix)


def load_chameleon(
    path: str | Path,
    device: str,
    what: str,
    trust_checkpoint: bool = False,
    backend: str = "ours",
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
):
    """(transformers model, tokenizer, VQGAN decoder or None, our decoder or None) of a Chameleon-format
    directory. Ours: the transformers model is on the meta device (config and vocabulary only) and our
    decoder is streamed, each linear quantized to ``quantize`` as it is filled; ``backend="transformers"``
    loads transformers' whole model at ``dtype`` (default :func:`.base.default_dtype`)."""
    from transformers import ChameleonForConditionalGeneration

    from .vq import find_chameleon_vqgan, load_chameleon_vqgan

    use_ours(backend)  # refuse a bad name before loading gigabytes
    path = require_dir(path, what)
    dtype = dtype or default_dtype(device)
    if backend == "transformers":
        hf = load_hf(ChameleonForConditionalGeneration, path, what, device, dtype, repair=expand_shard_norms)
        backbone = None
    else:
        hf, backbone = meta_chameleon(path, what), load_decoder(path, dtype, device, quantize)
    tok = load_tokenizer(path, what)
    ckpt = find_chameleon_vqgan(path)
    vq = load_chameleon_vqgan(ckpt, device, trust_checkpoint) if ckpt else None
    return hf, tok, vq, backbone


def load(
    path: str | Path,
    device: str = "cpu",
    size: int | None = None,
    trust_checkpoint: bool = False,
    backend: str = "ours",
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
) -> ModelBundle:
    """``size``: image side in pixels; by default the one the release name states, else 768.
    ``backend``, ``dtype``, ``quantize``: see :func:`load_chameleon`."""
    if size is not None and size % PATCH:  # before reading gigabytes
        raise ConfigError(f"Lumina-mGPT image sizes are multiples of {PATCH} pixels, got {size}")
    hf, tok, vq, backbone = load_chameleon(
        path, device, "Chameleon / Lumina-mGPT", trust_checkpoint, backend, dtype, quantize
    )
    side = size or size_from_name(Path(path).expanduser()) or 768
    return chameleon_pipeline(hf, tok, side, vq, backend, release=True, backbone=backbone)
