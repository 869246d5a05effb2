"""Emu3 (Emu3-Gen): its text model streams from the safetensors shards into our decoder and only its
VQ model of transformers' Emu3 is built (:mod:`.stream`); ``backend="transformers"`` loads
transformers' whole model and runs its modules instead (see :mod:`.base`).

Image format (transformers ``Emu3Processor`` / BAAI Emu3): the prompt ends with
``<|image start|>{h}*{w}<|image token|>``; then h rows of w ``<|visual token NNNNNN|>`` ids, each row
followed by ``<|extra_200|>`` (EOL); then ``<|extra_201|>`` (EOF), ``<|image end|>`` and EOS. We generate
through EOF (our layout's end token); the tokens after it carry no choice.

CFG follows the official Emu3-Gen example: the unconditional row is the negative prompt in the same
template, header included, and the positive prompt gets Emu3's quality suffix.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from ...core.errors import WeightsError
from ...core.layout import ImageLayout
from ..bundle import ModelBundle, rows_encoder
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
from .convert import config_from_text, from_hf, hf_names
from .stream import Checkpoint, stream_decoder, stream_module

POSITIVE = " masterpiece, film grained, best quality."
NEGATIVE = (
    "lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, "
    "cropped, worst quality, low quality, normal quality, jpeg artifacts, signature, watermark, "
    "username, blurry."
)
NAMES = {"boi": "<|image start|>", "wrapper": "<|image token|>", "eol": "<|extra_200|>", "eof": "<|extra_201|>"}
DEFAULTS = {"cfg": 3.0, "top_k": 2048, "temperature": 1.0}


def emu3_adapter(hf, backend: str = "ours", release: bool = False, backbone=None) -> nn.Module:
    """``hf``: an Emu3ForConditionalGeneration; the text model is the decoder stack.
    ``release``: our decoder only, drop transformers' copy of the layers (see :func:`.convert.from_hf`).
    ``backbone``: our decoder already loaded (the streaming load; ``hf`` then holds only its VQ model)."""
    if use_ours(backend):
        return backbone if backbone is not None else from_hf(hf, release)
    tm = hf.model.text_model
    tc = hf.config.text_config
    return HFAdapter(hf, tm, tm.embed_tokens, hf.lm_head, tc, tc.vocab_size, tc.max_position_embeddings)


def emu3_pipeline(
    hf,
    tokenizer,
    side: int = 90,
    image_processor=None,
    quality_suffix: bool = True,
    backend: str = "ours",
    release: bool = False,
    backbone=None,
) -> ModelBundle:
    """Square ``side`` x ``side`` token grid (90 -> 720 px, Emu3-Gen's default image area);
    ``backend``, ``release`` and ``backbone`` as in :func:`emu3_adapter`."""
    mapping = hf.model.vocabulary_mapping
    lo, hi = contiguous_range(mapping.image_tokens, "Emu3")
    ids = {k: token_id(tokenizer, getattr(tokenizer, f"{k}_token", None) or name) for k, name in NAMES.items()}
    layout = ImageLayout(side, side, (lo, hi), eol_id=ids["eol"], end_id=ids["eof"])
    bos = tokenizer.bos_token or ""
    header = f"{NAMES['boi']}{side}*{side}{NAMES['wrapper']}"
    lut = mapping.bpe2img_mapping_tensor.long()

    def tokens(text: str) -> list[int]:
        return list(tokenizer(bos + text + header, add_special_tokens=False)["input_ids"])

    def encode(text: str) -> list[int]:
        return tokens(text + (POSITIVE if quality_suffix else ""))

    def decode(grids: torch.Tensor, _=None):
        vq = hf.model.vqmodel
        codes = lut[grids.cpu()].to(next(vq.parameters()).device)
        pixels = each_image(vq.decode, codes)
        if image_processor is None:
            return to_pil(pixels)
        mean = torch.tensor(image_processor.image_mean, device=pixels.device)[:, None, None]
        std = torch.tensor(image_processor.image_std, device=pixels.device)[:, None, None]
        return to_pil(pixels.float() * std + mean, value_range=(0.0, 1.0))  # Emu3's postprocess

    return ModelBundle(
        "emu3",
        emu3_adapter(hf, backend, release, backbone),
        layout,
        rows_encoder(encode, tokens(NEGATIVE)),
        decode,
        dict(DEFAULTS),
    )


# the released layout (``BAAI/Emu3-Gen-hf``, and transformers' save_pretrained) and transformers' own
LAYOUTS = (
    ("text_model.model.", "text_model.lm_head.weight", "vqmodel."),
    ("model.text_model.", "lm_head.weight", "model.vqmodel."),
)


def stream_emu3(path: Path, dtype: torch.dtype, device: str, quantize: str | None = None):
    """(Emu3ForConditionalGeneration holding only its VQ model, streamed; our decoder streamed from the
    text model's tensors, each linear quantized to ``quantize`` as it is filled)."""
    from transformers import Emu3Config, Emu3ForConditionalGeneration

    offline()
    try:
        config = Emu3Config.from_pretrained(str(path), local_files_only=True)
    except Exception as e:
        raise WeightsError(f"cannot read the Emu3 config in {path}: {e}") from e
    source = Checkpoint(path)
    stack, head, vq = next((layout for layout in LAYOUTS if layout[0] + "embed_tokens.weight" in source), LAYOUTS[0])
    with torch.device("meta"):
        hf = Emu3ForConditionalGeneration(config)
    del hf.model.text_model, hf.lm_head
    stream_module(hf.model.vqmodel, vq, source, dtype, device)
    cfg = config_from_text(config.text_config, type(hf).__name__)
    cfg = replace(cfg, tie_embeddings=head not in source or bool(config.text_config.tie_word_embeddings))
    names = {**hf_names(cfg, stack), "head.weight": head}
    return hf.eval(), stream_decoder(cfg, names, source, dtype, device, quantize)


def load(
    path: str | Path,
    device: str = "cpu",
    size: int = 720,
    backend: str = "ours",
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
) -> ModelBundle:
    """``size``: image side in pixels (the VQ downsamples by 8; 720 is Emu3-Gen's default area).
    ``backend``: see :mod:`.base`; ours streams (:func:`stream_emu3`), ``"transformers"`` loads
    transformers' whole model. ``dtype``: default :func:`.base.default_dtype`."""
    from transformers import Emu3ForConditionalGeneration

    use_ours(backend)  # refuse a bad name before loading gigabytes
    path = require_dir(path, "Emu3")
    dtype = dtype or default_dtype(device)
    if backend == "transformers":
        hf, backbone = load_hf(Emu3ForConditionalGeneration, path, "Emu3", device, dtype), None
    else:
        hf, backbone = stream_emu3(path, dtype, device, quantize)
    tok = load_tokenizer(path, "Emu3")
    try:
        from transformers import AutoImageProcessor

        ip = AutoImageProcessor.from_pretrained(str(path), local_files_only=True)
    except Exception:  # no preprocessor_config.json: decode assumes pixels in [-1, 1]
        ip = None
    return emu3_pipeline(hf, tok, size // 8, ip, backend=backend, release=True, backbone=backbone)
