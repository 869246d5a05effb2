"""Janus / Janus-Pro image generation: transformers' Janus classes load it, its language model runs
on our decoder (``backend="transformers"`` runs transformers' modules instead; see :mod:`.base`).

In image mode Janus does not use its text head: image tokens are embedded by ``generation_embeddings``
+ ``generation_aligner`` and scored by ``generation_head`` over the VQ codebook only. Our interface has
one id space, so the adapter uses ``[0, n_text)`` for text ids and ``[n_text, n_text + codes)`` for
image codes; the logits of text ids are -inf (the layout's allowed range masks them anyway). These
image parts stay transformers' modules on both backends: they are small and trace as they are.
There is no EOL or end token: the grid is ``sqrt(num_image_tokens)`` square, raster order.

CFG follows Janus (and ``JanusForConditionalGeneration.generate``): the unconditional prompt is the
prompt itself with every token but BOS and the image-start token replaced by the pad token, so it
depends on the prompt.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from ...core.cache import KVCache
from ...core.errors import WeightsError
from ...core.layout import ImageLayout
from ..bundle import ModelBundle, rows_encoder
from .base import HFAdapter, default_dtype, each_image, load_hf, load_tokenizer, require_dir, to_pil, token_id, use_ours
from .convert import HEAD, STACKS, config_from_text, from_hf, hf_names
from .stream import Checkpoint, stream_decoder, stream_module

PROMPT = "<|User|>: {text}\n\n<|Assistant|>:"
IMAGE_START = "<begin_of_image>"
DEFAULTS = {"cfg": 5.0, "temperature": 1.0}


class JanusImageModel(nn.Module):
    """Janus in image mode on our decoder: its own image embedding and head around our backbone's
    :meth:`~jacobigen.models.transformer.Transformer.hidden` (the backbone's text head goes unused)."""

    def __init__(self, hf, backbone):
        super().__init__()
        m = hf.model
        self.backbone = backbone
        self.image_embed = m.generation_embeddings
        self.image_align = m.generation_aligner
        self.image_head = m.generation_head
        self.n_text, self.codes = backbone.vocab_size, m.vqmodel.config.num_embeddings
        self.vocab_size = self.n_text + self.codes
        self.max_seq_len = backbone.max_seq_len

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        return self.backbone.new_cache(rows, capacity)

    def forward(self, tokens, positions=None, mask=None, cache=None):
        text = self.backbone.embed(tokens.clamp(max=self.n_text - 1))
        image = self.image_align(self.image_embed((tokens - self.n_text).clamp(0, self.codes - 1)))
        x = torch.where((tokens >= self.n_text)[..., None], image.to(text.dtype), text)
        logits = self.image_head(self.backbone.hidden(x, positions, mask, cache))
        pad = logits.new_full((*logits.shape[:-1], self.n_text), float("-inf"))
        return torch.cat([pad, logits], dim=-1).float()


def janus_adapter(hf, backend: str = "ours", release: bool = False, backbone=None) -> nn.Module:
    """``hf``: a JanusForConditionalGeneration; ids >= text vocab are image codes.
    ``release``: our decoder only, drop transformers' copy of the layers (see :func:`.convert.from_hf`).
    ``backbone``: our decoder already loaded (the streaming load), instead of converting ``hf``'s."""
    if use_ours(backend):
        return JanusImageModel(hf, backbone if backbone is not None else from_hf(hf, release))
    m = hf.model
    n_text = hf.config.text_config.vocab_size
    codes = m.vqmodel.config.num_embeddings

    def embed(tokens):
        is_image = (tokens >= n_text)[..., None]
        text = m.language_model.embed_tokens(tokens.clamp(max=n_text - 1))
        image = hf.prepare_embeddings_for_image_generation((tokens - n_text).clamp(0, codes - 1))
        return torch.where(is_image, image.to(text.dtype), text)

    def head(hidden):
        logits = m.generation_head(hidden)
        pad = logits.new_full((*logits.shape[:-1], n_text), float("-inf"))
        return torch.cat([pad, logits], dim=-1)

    return HFAdapter(
        hf,
        m.language_model,
        embed,
        head,
        hf.config.text_config,
        n_text + codes,
        hf.config.text_config.max_position_embeddings,
    )


def janus_pipeline(hf, tokenizer, backend: str = "ours", release: bool = False, backbone=None) -> ModelBundle:
    """``backend``, ``release`` and ``backbone`` as in :func:`janus_adapter`."""
    n_text = hf.config.text_config.vocab_size
    codes = hf.model.vqmodel.config.num_embeddings
    side = math.isqrt(hf.config.vision_config.num_image_tokens)
    layout = ImageLayout(side, side, (n_text, n_text + codes))
    gen_cfg = hf.generation_config
    boi = (getattr(gen_cfg, "generation_kwargs", None) or {}).get("boi_token_id") or token_id(tokenizer, IMAGE_START)
    pad = gen_cfg.pad_token_id if gen_cfg.pad_token_id is not None else tokenizer.pad_token_id
    bos = tokenizer.bos_token_id

    def encode(text: str) -> list[int]:
        """Janus' chat template strips the message (``apply_sft_template_for_multi_turn_prompts``)."""
        ids = list(tokenizer(PROMPT.format(text=text.strip()))["input_ids"])
        if bos is not None and (not ids or ids[0] != bos):
            ids = [bos] + ids
        return ids + [boi]

    def uncond_for(text: str) -> list[int]:
        ids = encode(text)
        return [ids[0]] + [pad] * (len(ids) - 2) + [ids[-1]]

    def decode(grids: torch.Tensor, _=None):
        vq = hf.model.vqmodel
        codes_ = (grids - n_text).flatten(1).to(next(vq.parameters()).device)
        return to_pil(each_image(vq.decode, codes_))

    return ModelBundle(
        "janus",
        janus_adapter(hf, backend, release, backbone),
        layout,
        rows_encoder(encode, uncond_for),
        decode,
        dict(DEFAULTS),
    )


IMAGE_PARTS = ("vqmodel", "generation_embeddings", "generation_aligner", "generation_head")


def read_config(path: Path):
    """The folder's JanusConfig (a WeightsError naming the folder when transformers cannot read it)."""
    from transformers import JanusConfig

    try:
        return JanusConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as e:
        raise WeightsError(f"cannot read the Janus config in {path}: {e}") from e


def meta_image_parts(config):
    """JanusForConditionalGeneration of ``config`` on the meta device with only what image generation
    runs besides the language model: the VQ model and the generation embedding, aligner and head. The
    vision encoder and aligner (image understanding) and transformers' language model are dropped. The
    memory plan counts this model too."""
    from transformers import JanusForConditionalGeneration

    with torch.device("meta"):
        hf = JanusForConditionalGeneration(config)
    for name in ("vision_model", "aligner", "language_model"):
        delattr(hf.model, name)
    del hf.lm_head
    return hf


def image_parts(path: Path, dtype: torch.dtype, device: str, source: Checkpoint):
    """:func:`meta_image_parts` streamed from ``source``, with the release's generation config."""
    from transformers import GenerationConfig

    hf = meta_image_parts(read_config(path))
    for name in IMAGE_PARTS:
        stream_module(getattr(hf.model, name), f"model.{name}.", source, dtype, device)
    if (path / "generation_config.json").is_file():
        hf.generation_config = GenerationConfig.from_pretrained(str(path), local_files_only=True)
    return hf.eval()


def load(
    path: str | Path,
    device: str = "cpu",
    backend: str = "ours",
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
) -> ModelBundle:
    """``backend``: see :mod:`.base`. Ours streams (:mod:`.stream`): the language model into our decoder,
    each linear quantized to ``quantize`` as it is filled, and only the image parts of transformers'
    model; ``backend="transformers"`` loads transformers' whole model (``dtype``: default
    :func:`.base.default_dtype`)."""
    from transformers import JanusForConditionalGeneration

    use_ours(backend)  # refuse a bad name before loading gigabytes
    path = require_dir(path, "Janus")
    tokenizer = load_tokenizer(path, "Janus")
    dtype = dtype or default_dtype(device)
    if backend == "transformers":
        hf = load_hf(JanusForConditionalGeneration, path, "Janus", device, dtype)
        return janus_pipeline(hf, tokenizer, backend)
    source = Checkpoint(path)
    hf = image_parts(path, dtype, device, source)
    cfg = config_from_text(hf.config.text_config, type(hf).__name__)
    cfg = replace(cfg, tie_embeddings=HEAD not in source or bool(hf.config.text_config.tie_word_embeddings))
    backbone = stream_decoder(cfg, hf_names(cfg, STACKS[type(hf).__name__][0]), source, dtype, device, quantize)
    return janus_pipeline(hf, tokenizer, backbone=backbone)
