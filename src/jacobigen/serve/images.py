"""Token grids as pictures for the wire: finished images, previews of images in progress, PNG as base64."""

from __future__ import annotations

import base64
import io

import numpy as np
import torch
from PIL import Image


def png_b64(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def pictures(bundle, tokens: torch.Tensor) -> list[Image.Image]:
    """Images of token sequences [n, length], as ``jacobigen generate`` decodes them."""
    return bundle.decode(bundle.layout.grid(tokens), None)


def image_size(bundle) -> str:
    """The model's image size, "WxH", from one grid of its first image id decoded: a grid of zeros
    is no image for a model whose codes start past 0 (Lumina-mGPT 2.0's MoVQGAN at 155000)."""
    layout = bundle.layout
    width, height = pictures(bundle, torch.full((1, layout.length), layout.image_ids[0]))[0].size
    return f"{width}x{height}"


def preview(bundle, tokens: torch.Tensor, when: torch.Tensor) -> Image.Image:
    """An image in progress: committed tokens drawn (``when >= 0``), the rest grey. The VQ decoder
    needs an id everywhere, so uncommitted cells hold the first image id before it runs."""
    layout = bundle.layout
    settled = when >= 0
    grid = layout.grid(torch.where(settled, tokens, layout.image_ids[0])[None])
    picture = np.array(bundle.decode(grid, None)[0])
    cells = layout.grid(settled.long()[None])[0].numpy().astype(bool)
    scale = picture.shape[0] // cells.shape[0], picture.shape[1] // cells.shape[1]
    mask = cells.repeat(scale[0], 0).repeat(scale[1], 1)
    picture[~mask] = 128
    return Image.fromarray(picture)
