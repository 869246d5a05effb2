"""Lumina-mGPT (and Chameleon-format checkpoints) through transformers' Chameleon classes.

Lumina-mGPT's image format (Alpha-VLLM/Lumina-mGPT ``item_processor.py``): ``<racm3:break>``, two size
tokens ``<reserved{8800+n}>`` for the height and width in 32-pixel grids, then rows of 2n VQ tokens each
followed by ``<reserved08799>`` (EOL), then ``<eoss>`` (end of image). Image cells may only take the
``IMGIMG*`` ids of the vocabulary map. CFG follows Lumina's convention: the unconditional branch starts
at the image-start token, i.e. its prompt is the header alone.

``ChameleonForConditionalGeneration.forward`` masks image ids out of the logits (it is a text
generator), so the adapter runs ``model.model`` and ``lm_head`` itself. transformers ships no Chameleon
VQ *decoder*; the original VQGAN decoder (``vqgan.ckpt`` of Meta's Chameleon release, which Lumina-mGPT
also asks for) is loaded into a taming-style decoder from :mod:`.vq`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..layout import ImageLayout
from ..pipeline import palette_decode
from .base import FamilyPipeline, HFAdapter, contiguous_range, load_hf, load_tokenizer, require_dir, to_pil, token_id

IMAGE_START, IMAGE_END, NEW_LINE = "<racm3:break>", "<eoss>", "<reserved08799>"
PROMPT = "Generate an image of {w}x{h} according to the following prompt:\n{text}"
TURN_END = "<reserved08706>"
PATCH = 32       # pixels per size-token grid; the VQ downsamples by 16, so 2 tokens per grid
DEFAULTS = {"cfg": 3.0, "top_k": 2000, "temperature": 1.0}


def grid_token(n: int) -> str:
    return f"<reserved{8800 + n:05d}>"


def chameleon_adapter(hf) -> HFAdapter:
    """``hf``: a ChameleonForConditionalGeneration; logits keep the image ids (unlike its forward)."""
    cfg = hf.config
    return HFAdapter(hf, hf.model, hf.model.embed_tokens, hf.lm_head, cfg, cfg.vocab_size,
                     cfg.max_position_embeddings)


def chameleon_pipeline(hf, tokenizer, size: int = 768, vq_decoder=None) -> FamilyPipeline:
    """Pipeline for a ``size`` x ``size`` image (multiple of 32 pixels)."""
    grids = size // PATCH
    mapping = hf.model.vocabulary_mapping
    lo, hi = contiguous_range(mapping.image_tokens, "Chameleon")
    header = [token_id(tokenizer, IMAGE_START), token_id(tokenizer, grid_token(grids)),
              token_id(tokenizer, grid_token(grids))]
    layout = ImageLayout(2 * grids, 2 * grids, (lo, hi), eol_id=token_id(tokenizer, NEW_LINE),
                         end_id=token_id(tokenizer, IMAGE_END))
    lut = torch.zeros(hi, dtype=torch.int64)
    for bpe, code in mapping.bpe2img.items():
        lut[bpe] = code

    def encode(text: str) -> list[int]:
        ids = tokenizer(PROMPT.format(w=size, h=size, text=text) + TURN_END)["input_ids"]
        return list(ids) + header

    def decode(grids_: torch.Tensor):
        if vq_decoder is None:
            return palette_decode(grids_, (lo, hi))
        codes = lut[grids_.cpu()]
        with torch.inference_mode():
            return to_pil(vq_decoder.decode_codes(codes))

    note = "" if vq_decoder is not None else "no vqgan.ckpt found: images are token palettes"
    return FamilyPipeline("chameleon", chameleon_adapter(hf), layout, encode, header, decode,
                          dict(DEFAULTS), note)


def load(path: str | Path, device: str = "cpu", size: int = 768) -> FamilyPipeline:
    from transformers import ChameleonForConditionalGeneration

    from .vq import find_chameleon_vqgan, load_chameleon_vqgan

    path = require_dir(path, "Chameleon / Lumina-mGPT")
    hf = load_hf(ChameleonForConditionalGeneration, path, "Chameleon", device)
    tok = load_tokenizer(path, "Chameleon")
    ckpt = find_chameleon_vqgan(path)
    vq = load_chameleon_vqgan(ckpt, device) if ckpt else None
    return chameleon_pipeline(hf, tok, size, vq)
