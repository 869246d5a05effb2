"""Resolve a ``--model`` string to a :class:`~jacobigen.pipeline.Pipeline`."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from PIL import Image

from . import embedded as E
from .errors import ConfigError
from .layout import ImageLayout
from .model import load_transformer
from .pipeline import Pipeline, random_pipeline

WEIGHTS = Path(__file__).parent / "weights"
EMBEDDED_PROMPTS = ["red heart", "grinning face", "red apple", "blue car", "sun", "green tree",
                    "yellow star", "pizza"]


def embedded_pipeline(weights: Path = WEIGHTS, device: str = "cpu") -> Pipeline:
    """The emoji model that ships in the package: VQ tokenizer + text-conditioned AR transformer."""
    from .vq import VQModel

    vq = VQModel.load(Path(weights) / "vq.safetensors", device=device)
    model = load_transformer(Path(weights) / "ar.safetensors", device=device)
    # LANTERN/GSD neighbours come from the VQ codebook rows of the image ids.
    model.latent_codebook = vq.quantizer.codes().detach()
    layout = ImageLayout(E.GRID, E.GRID, (0, E.CODEBOOK_SIZE), eol_id=E.EOL, end_id=E.EOI)

    def decode(grids: torch.Tensor) -> list[Image.Image]:
        pixels = (vq.decode(grids) * 255).round().byte().permute(0, 2, 3, 1).cpu().numpy()
        return [Image.fromarray(p) for p in pixels]

    return Pipeline("emoji", model, layout, E.caption_tokens, E.unconditional_tokens(), decode,
                    defaults={"cfg": 3.0, "temperature": 1.0, "top_k": 200},
                    example_prompts=EMBEDDED_PROMPTS, reference=lambda: heldout_reference(weights))


def heldout_reference(weights: Path = WEIGHTS) -> tuple[list[str], list[Image.Image]]:
    """Captions and 64x64 images of the held-out emoji shipped beside the weights (names never
    seen in training, in a fixed shuffled order; ``training/make_heldout_reference.py``)."""
    meta = json.loads((Path(weights) / "heldout.json").read_text())
    sheet = Image.open(Path(weights) / "heldout.png").convert("RGB")
    t, cols = meta["tile"], meta["columns"]
    boxes = [(j % cols * t, j // cols * t, j % cols * t + t, j // cols * t + t) for j in range(meta["count"])]
    return meta["captions"], [sheet.crop(box) for box in boxes]


def load_pipeline(spec: str = "default", device: str | None = None, trust_checkpoint: bool = False) -> Pipeline:
    """``default``/``emoji`` (shipped), ``random``, or ``FAMILY:PATH`` for a real model family.
    ``device=None`` picks CUDA when available. ``trust_checkpoint`` lets a family read pickled
    checkpoints that hold Python objects (unpickling them can run code)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "random":
        return random_pipeline()
    if spec in ("default", "emoji"):
        return embedded_pipeline(device=device)
    family, _, path = spec.partition(":")
    from .families import FAMILIES, load_family

    if family.lower() in FAMILIES and path:
        return load_family(family, path, device, trust_checkpoint)
    raise ConfigError(f"unknown model {spec!r}: use 'default', 'random' or FAMILY:PATH with FAMILY "
                      f"one of {', '.join(sorted(FAMILIES))}")
