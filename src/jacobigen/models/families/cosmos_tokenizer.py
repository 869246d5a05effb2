"""Cosmos' discrete video tokenizer, decoder side: FSQ indices -> codes, and tokens -> frames.

Facts from NVIDIA/Cosmos ``cosmos1/models/autoregressive/tokenizer`` (``discrete_video.py``,
``quantizers.py``): Cosmos-1.0-Tokenizer-DV8x16x16 quantizes with FSQ levels [8, 8, 8, 5, 5, 5]
(64,000 codes; index = sum of level digits times the cumulative product of the levels before),
compresses 8x in time (a chunk of ``1 + 8k`` frames becomes ``1 + k`` latent frames) and 16x16 in
space. Its decoder ships as TorchScript (``decoder.jit``: indices [B, t, h, w] -> video
[B, 3, 1 + 8(t - 1), 16h, 16w] in [-1, 1]), decoded chunk by chunk of latent frames; Cosmos scales
the output with ``x * 0.5 + 0.5`` clamped to [0, 1].

What runs here: the FSQ code arithmetic is ours (checked against the formula above); the pixel
decoder is Cosmos' own TorchScript file, loaded as it is (we do not reimplement its convolutional
network). Without the file, :func:`preview` shows each latent frame's FSQ codes as colours, one
16 x 16 block per token: the clip's shape in tokens, not its pixels.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from ...core.errors import WeightsError

LEVELS = (8, 8, 8, 5, 5, 5)
TIME, SPACE = 8, 16  # DV8x16x16: frames per latent frame after the first, pixels per token side


def fsq_codes(indices: torch.Tensor, levels: tuple[int, ...] = LEVELS) -> torch.Tensor:
    """Codes [..., len(levels)] in [-1, 1] of FSQ indices [...]: each index's digits in the mixed
    radix of ``levels``, centred and scaled by half the level count."""
    lv = torch.tensor(levels, device=indices.device)
    basis = torch.cumprod(torch.cat([lv.new_ones(1), lv[:-1]]), 0)
    digits = (indices[..., None] // basis) % lv
    half = lv // 2
    return (digits - half).float() / half


def pixel_frames(length: int) -> int:
    """Frames a chunk of ``length`` latent frames decodes to (causal: the first latent is one frame)."""
    return 1 + TIME * (length - 1)


class JitDecoder:
    """Cosmos' TorchScript decoder run as ``DiscreteVideoFSQTokenizer.decode`` runs it: on chunks of
    ``chunk`` latent frames, at most 4 chunks per call, in bf16 on a GPU (float32 on the CPU);
    returns frames [B, T, H, W, 3] as uint8."""

    per_call = 4  # Cosmos' max_dec_batch_size

    def __init__(self, path: Path, chunk: int, device: str):
        try:
            with warnings.catch_warnings():  # TorchScript is deprecated in torch, but it is what Cosmos ships
                warnings.simplefilter("ignore", DeprecationWarning)
                self.net = torch.jit.load(str(path), map_location=device).eval()
            if torch.device(device).type == "cuda":
                self.net = self.net.to(torch.bfloat16)
        except Exception as e:
            raise WeightsError(f"cannot load the Cosmos video decoder {path}: {e}") from e
        self.chunk, self.device = chunk, device

    @torch.no_grad()
    def __call__(self, indices: torch.Tensor) -> torch.Tensor:
        b, t, h, w = indices.shape
        if t % self.chunk:
            raise WeightsError(f"{t} latent frames do not split into the decoder's chunks of {self.chunk}")
        chunks = indices.to(self.device).reshape(b * (t // self.chunk), self.chunk, h, w)
        video = torch.cat([self.net(c).float() for c in chunks.split(self.per_call)])  # [B n, 3, T, H, W] in [-1, 1]
        video = video.reshape(b, t // self.chunk, *video.shape[1:]).permute(0, 1, 3, 4, 5, 2)
        pixels = (video * 0.5 + 0.5).clamp(0, 1).flatten(1, 2)  # [B, n T, H, W, 3]
        return (pixels * 255).round().to(torch.uint8).cpu()


def preview(indices: torch.Tensor, levels: tuple[int, ...] = LEVELS) -> torch.Tensor:
    """Frames [B, t, 16h, 16w, 3] uint8 of tokens [B, t, h, w]: three FSQ digits as RGB."""
    rgb = (fsq_codes(indices, levels)[..., :3] * 0.5 + 0.5).clamp(0, 1)
    big = rgb.repeat_interleave(SPACE, 2).repeat_interleave(SPACE, 3)
    return (big * 255).round().to(torch.uint8).cpu()


def find_decoder(model_dir: Path) -> Path | None:
    """``decoder.jit`` beside the weights, in ``tokenizer/``, or in the tokenizer's release folder
    next to the model's (Cosmos' own checkpoint layout)."""
    for candidate in (
        model_dir / "decoder.jit",
        model_dir / "tokenizer" / "decoder.jit",
        model_dir.parent / "Cosmos-1.0-Tokenizer-DV8x16x16" / "decoder.jit",
    ):
        if candidate.is_file():
            return candidate
    return None
