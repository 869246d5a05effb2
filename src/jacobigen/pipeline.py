"""A model family plugged in: model, image layout, text -> prompt tokens, and token grid -> pixels.

Decoders only see the model interface and the layout; everything family-specific (prompt format,
unconditional prompt for CFG, VQ decoder, recommended sampling) lives in a :class:`Pipeline`.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from PIL import Image

from .api import Generation, generate
from .contract import ImageModel
from .embedded import byte_note
from .errors import ConfigError, PromptWarning
from .layout import ImageLayout, VideoLayout
from .model import Transformer, TransformerConfig

PROMPT_BYTES = 48     # the random model's prompt bytes, as the byte-caption emoji model's


@dataclass
class Pipeline:
    name: str
    model: ImageModel                            # the decoders' model contract
    layout: ImageLayout
    encode: Callable[[str], list[int]]           # text prompt -> conditional prompt tokens
    uncond: list[int]                            # unconditional prompt for CFG
    decode: Callable[[torch.Tensor], list]       # grids [B, rows, cols] -> images ([B, F, R, C] -> frames per clip)
    defaults: dict = field(default_factory=dict)  # recommended sampling (cfg, temperature, top_k...)
    note: str = ""                               # shown to users (e.g. "random weights")
    example_prompts: list[str] = field(default_factory=lambda: ["red heart", "blue car", "smiling face",
                                                                "green tree", "yellow star"])
    # held-out (captions, images) to measure FID against data; None when the model ships none
    reference: Callable[[], tuple[list[str], list[Image.Image]]] | None = None
    # why the encoder will not read all of a prompt (too long, unknown words), or None
    prompt_note: Callable[[str], str | None] | None = None
    max_frames: int | None = None                # a video model's longest clip (None: its layout's frames only)

    def with_frames(self, frames: int | None) -> Pipeline:
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

    def texts(self, prompts) -> list[str]:
        """``prompts`` (one text or a list) checked: a :class:`ConfigError` for anything but text, a
        :class:`PromptWarning` for each prompt the model will not read in full."""
        prompts = [prompts] if isinstance(prompts, str) else prompts
        if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, str) for p in prompts):
            raise ConfigError(f"prompts must be a text or a non-empty list of texts, got {prompts!r:.60}")
        for p in dict.fromkeys(prompts):
            note = self.prompt_note(p) if self.prompt_note else None
            if note:
                warnings.warn(f"prompt {p[:40]!r}{'...' if len(p) > 40 else ''}: the {self.name} model {note}",
                              PromptWarning, stacklevel=3)
        return list(prompts)

    def generate(self, prompts: str | list[str], **kwargs) -> tuple[Generation, list[Image.Image]]:
        """Sample images for text prompts; keyword arguments override the recommended sampling."""
        prompts = self.texts(prompts)
        opts = {**self.defaults, **kwargs}
        tokens = [self.encode(p) for p in prompts]
        gen = generate(self.model, tokens if len(tokens) > 1 else tokens[0], layout=self.layout,
                       uncond=self.uncond, **opts)
        return gen, self.decode(gen.grid)


def palette_decode(grids: torch.Tensor, image_ids: tuple[int, int]) -> list[Image.Image]:
    """Show a token grid as colours (a stand-in for a VQ decoder): one fixed colour per id."""
    lo, hi = image_ids
    colours = np.random.default_rng(0).integers(0, 256, size=(hi - lo, 3), dtype=np.uint8)
    return [Image.fromarray(colours[g - lo]) for g in grids.cpu().numpy()]


def random_video_pipeline(seed: int = 0, frames: int = 4, side: int = 8, codes: int = 1024, max_frames: int = 8,
                          device: str = "cpu") -> Pipeline:
    """A random-weight clip model with every structural token (end of line, frame and clip): for
    trying the video tools, not for pictures."""
    torch.manual_seed(seed)
    eol, boi, bos, eof, end = range(codes, codes + 5)
    layout = VideoLayout(side, side, (0, codes), eol_id=eol, end_id=end, header=(boi,), frames=frames, eof_id=eof)
    cfg = TransformerConfig(vocab_size=codes + 5 + 256, dim=128, n_layers=4, n_heads=4,
                            max_seq_len=64 + replace(layout, frames=max_frames).length)

    def encode(text: str) -> list[int]:
        return [bos, *(codes + 5 + b for b in text.encode()[:PROMPT_BYTES])]

    model = _peaked(Transformer(cfg))
    return Pipeline("random-video", model.to(device).eval(), layout, encode, [bos],
                    lambda g: [palette_decode(clip, layout.image_ids) for clip in g],
                    note="random weights: clips are noise, for trying the tools",
                    prompt_note=functools.partial(byte_note, limit=PROMPT_BYTES), max_frames=max_frames)


def _peaked(model: Transformer) -> Transformer:
    """Fan-in scaled weights: peaked, context-dependent next-token laws."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, p.shape[1] ** -0.5)
        model.embed.weight.normal_(0, 1.0)
    return model


def random_pipeline(seed: int = 0, rows: int = 16, cols: int = 16, codes: int = 1024, device: str = "cpu") -> Pipeline:
    """A random-weight model with a realistic layout: for trying the tools, not for pictures."""
    torch.manual_seed(seed)
    eol, boi, bos = codes, codes + 1, codes + 2
    cfg = TransformerConfig(vocab_size=codes + 3 + 256, dim=128, n_layers=4, n_heads=4,
                            max_seq_len=64 + rows * (cols + 1))
    layout = ImageLayout(rows, cols, (0, codes), eol_id=eol, header=(boi,))

    def encode(text: str) -> list[int]:
        return [bos, *(codes + 3 + b for b in text.encode()[:PROMPT_BYTES])]

    model = _peaked(Transformer(cfg))
    return Pipeline("random", model.to(device).eval(), layout, encode, [bos],
                    lambda g: palette_decode(g, layout.image_ids),
                    note="random weights: images are noise, for trying the tools; --model default draws emoji",
                    prompt_note=functools.partial(byte_note, limit=PROMPT_BYTES))
