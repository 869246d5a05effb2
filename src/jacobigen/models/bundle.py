"""A model as data, and the one path from text to images (docs/DESIGN.md §5.3).

A :class:`ModelBundle` holds what a model supplies (the model, its token layout, how texts become
token rows, how token grids become pixels, the recommended sampling) and runs
nothing itself: :func:`generate_images` is the only generation path, for the embedded models, the
random ones and every family alike. Prompt state that is not in the ids (LlamaGen's caption
embeddings) travels in the encoded :class:`Prompts`, so encoding never changes the bundle's model.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from PIL import Image

from ..core.contract import ImageModel, model_dtype
from ..core.errors import ConfigError, PromptWarning
from ..core.layout import ImageLayout, VideoLayout
from ..decode.api import Generation, generate

EXAMPLE_PROMPTS = ("red heart", "blue car", "smiling face", "green tree", "yellow star")


@dataclass(frozen=True)
class Prompts:
    """A batch of texts as the model reads them: per text its conditional row and its unconditional
    row for CFG (None: the model has none), and the model those rows condition (None: the
    bundle's; a view of it when the rows refer to state outside the ids)."""

    texts: list[str]
    cond: list[list[int]]
    uncond: list[list[int]] | None
    model: ImageModel | None = None


@dataclass(frozen=True)
class ModelBundle:
    name: str
    model: ImageModel  # the decoders' model contract
    layout: ImageLayout
    encode_batch: Callable[[list[str]], Prompts]  # texts -> token rows (a ConfigError for a prompt it cannot read)
    decode: Callable[[torch.Tensor, Prompts | None], list]  # grids [B, R, C] -> images; clips [B, F, R, C] -> frames
    defaults: dict = field(default_factory=dict)  # recommended sampling (cfg, temperature, top_k...)
    note: str = ""  # shown to users (e.g. "random weights")
    example_prompts: list[str] = field(default_factory=lambda: list(EXAMPLE_PROMPTS))
    # held-out (captions, images) to measure FID against data; None when the model ships none
    reference: Callable[[], tuple[list[str], list[Image.Image]]] | None = None
    # why the encoder will not read all of a prompt (too long, unknown words), or None
    prompt_note: Callable[[str], str | None] | None = None
    max_frames: int | None = None  # a video model's longest clip (None: its layout's frames only)
    latents: torch.Tensor | None = None  # image ids' VQ codebook rows, GSD/LANTERN's neighbours

    @property
    def dtype(self) -> str | None:
        """The model's dtype (``"float32"``, ``"bfloat16"``...): whose distribution the bundle samples."""
        return model_dtype(self.model)

    def with_frames(self, frames: int | None) -> ModelBundle:
        """The same video model making clips of ``frames`` frames (None: its own number)."""
        lay = self.layout
        if not isinstance(lay, VideoLayout):
            raise ConfigError(f"the {self.name} model makes images, not clips: use `jacobigen generate`")
        if frames is None or frames == lay.frames:
            return self
        if self.max_frames is None or not 1 <= frames <= self.max_frames:
            can = f"1 to {self.max_frames}" if self.max_frames else f"exactly {lay.frames}"
            raise ConfigError(f"--frames {frames}: the {self.name} model makes clips of {can} frames")
        return replace(self, layout=replace(lay, frames=frames))

    def encode(self, prompts) -> Prompts:
        """``prompts`` (one text or a list) checked and encoded, with the model they condition: a
        :class:`ConfigError` for anything but text, a :class:`PromptWarning` for each prompt the
        model will not read in full, and for an empty one."""
        prompts = [prompts] if isinstance(prompts, str) else prompts
        if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, str) for p in prompts):
            raise ConfigError(f"prompts must be a text or a non-empty list of texts, got {prompts!r:.60}")
        for p in dict.fromkeys(prompts):
            if not p.strip():
                note = "conditions on no text for an empty prompt (its image is as good as unconditional)"
            else:
                note = self.prompt_note(p) if self.prompt_note else None
            if note:
                warnings.warn(
                    f"prompt {p[:40]!r}{'...' if len(p) > 40 else ''}: the {self.name} model {note}",
                    PromptWarning,
                    stacklevel=3,
                )
        encoded = self.encode_batch(list(prompts))
        return encoded if encoded.model is not None else replace(encoded, model=self.model)

    def generate(self, prompts, **kwargs) -> tuple[Generation, list]:
        """:func:`generate_images` with this bundle (the name the README and older code use)."""
        return generate_images(self, prompts, **kwargs)


def generate_images(bundle: ModelBundle, prompts, **kwargs) -> tuple[Generation, list]:
    """Sample images (clips for a video layout) for text prompts: encode -> decode tokens -> decode
    images. Keyword arguments are :func:`jacobigen.generate`'s and override the bundle's sampling
    defaults; a list of seeds with one prompt samples it once per seed."""
    opts = {**bundle.defaults, **kwargs}
    texts = [prompts] if isinstance(prompts, str) else prompts
    seed = opts.pop("seed", 0)
    if isinstance(texts, (list, tuple)) and len(texts) == 1 and isinstance(seed, (list, tuple)):
        texts = list(texts) * len(seed)
    enc = bundle.encode(texts)
    gen = generate(
        enc.model, enc.cond, layout=bundle.layout, uncond=enc.uncond, seed=seed, latents=bundle.latents, **opts
    )
    return gen, bundle.decode(gen.grid, enc)


def encode_one(bundle: ModelBundle, text: str) -> tuple[ImageModel, list[int], list[int] | None]:
    """(model, conditional row, unconditional row or None) of one text, as :func:`generate_images`
    encodes it: for tools that drive the decoders themselves."""
    enc = bundle.encode([text])
    return enc.model, enc.cond[0], enc.uncond[0] if enc.uncond else None


def rows_encoder(
    encode: Callable[[str], list[int]], uncond: list[int] | Callable[[str], list[int]] | None
) -> Callable[[list[str]], Prompts]:
    """``encode_batch`` of a model whose prompts are ids alone: ``encode(text)`` gives the conditional
    row and ``uncond`` the unconditional one (one row for all, a function of the text, or None)."""

    def encode_batch(texts: list[str]) -> Prompts:
        unconds = None if uncond is None else [uncond(t) if callable(uncond) else list(uncond) for t in texts]
        return Prompts(texts, [encode(t) for t in texts], unconds)

    return encode_batch


def palette_decode(grids: torch.Tensor, image_ids: tuple[int, int]) -> list[Image.Image]:
    """Show a token grid as colours (a stand-in for a VQ decoder): one fixed colour per id."""
    lo, hi = image_ids
    colours = np.random.default_rng(0).integers(0, 256, size=(hi - lo, 3), dtype=np.uint8)
    return [Image.fromarray(colours[g - lo]) for g in grids.cpu().numpy()]


Pipeline = ModelBundle  # the earlier name, kept for user code
