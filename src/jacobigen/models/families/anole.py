"""Anole (GAIR-NLP/anole; Meta Chameleon fine-tuned for image generation): a Chameleon-format folder,
streamed into our decoder like :mod:`.chameleon` (whose ``backend``, ``dtype`` and ``quantize`` it shares).

Facts from Anole's ``text2image.py`` and its ``chameleon/inference/chameleon.py``: the prompt is
``<s>`` + the text's tokens + ``<reserved08706>`` (end of turn), then the image starts with
``<racm3:break>``; the image is exactly 1024 VQ tokens (a 32 x 32 grid, 512 px) in raster order with
no size and no end-of-line tokens, closed by ``<eoss>``. Cells may take only the ``IMGIMG*`` ids.
Its CFG has three rows (full prompt, image-only context, ``[<s>, <racm3:break>]``) mixed as
``u + 1.2 (i - u) + 3.0 (c - i)``; for a text-only prompt the image-only row keeps just ``<s>`` and
``<racm3:break>``, so it *is* the unconditional row and the mix is two-row CFG with scale 3.0.
Sampling: temperature 0.7, top-p 0.9, no top-k.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...core.errors import WeightsError
from ...core.layout import ImageLayout
from ..bundle import ModelBundle, rows_encoder
from .base import token_id
from .chameleon import IMAGE_END, IMAGE_START, TURN_END, chameleon_adapter, image_decoder, load_chameleon

SIDE = 32  # 1024 tokens: 512 px through the 16x VQGAN
DEFAULTS = {"cfg": 3.0, "temperature": 0.7, "top_p": 0.9}


def anole_pipeline(
    hf, tokenizer, vq_decoder=None, side: int = SIDE, backend: str = "ours", release: bool = False, backbone=None
) -> ModelBundle:
    """``side``: tokens per image side (Anole was trained on 32; tiny test models take fewer);
    ``backend``, ``release`` and ``backbone`` as in :func:`.chameleon.chameleon_adapter`."""
    lo, hi, decode = image_decoder(hf, vq_decoder)
    bos = tokenizer.bos_token_id
    if bos is None:
        raise WeightsError("the Anole tokenizer has no BOS token (<s>): is this the right model directory?")
    boi, eot = token_id(tokenizer, IMAGE_START), token_id(tokenizer, TURN_END)
    layout = ImageLayout(side, side, (lo, hi), end_id=token_id(tokenizer, IMAGE_END))

    def encode(text: str) -> list[int]:
        return [bos, *tokenizer(text, add_special_tokens=False)["input_ids"], eot, boi]

    note = "" if vq_decoder is not None else "no vqgan.ckpt found: images are token palettes"
    return ModelBundle(
        "anole",
        chameleon_adapter(hf, backend, release, backbone),
        layout,
        rows_encoder(encode, [bos, boi]),
        decode,
        dict(DEFAULTS),
        note=note,
    )


def load(
    path: str | Path,
    device: str = "cpu",
    trust_checkpoint: bool = False,
    backend: str = "ours",
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
) -> ModelBundle:
    """A transformers-format Anole directory (e.g. ``leloy/Anole-7b-v0.1-hf``) with Chameleon's
    ``vqgan.ckpt`` in it or in ``tokenizer/``; ``backend``, ``dtype``, ``quantize``: see
    :func:`.chameleon.load_chameleon`."""
    hf, tok, vq, backbone = load_chameleon(path, device, "Anole", trust_checkpoint, backend, dtype, quantize)
    return anole_pipeline(hf, tok, vq, backend=backend, release=True, backbone=backbone)
