"""SBER-MoVQGAN's decoder (codes -> pixels), the image tokenizer of Lumina-mGPT 2.0.

MoVQGAN (ai-forever/MoVQGAN) is a taming-style VQGAN whose decoder norms are *spatially modulated*:
each GroupNorm is followed by a per-pixel scale and shift computed (two 1x1 convolutions) from the
quantized code vectors, upsampled by nearest neighbour to the feature map. The decoder receives the
codes twice: through ``post_quant_conv`` as its input and, unchanged, as the modulation. Generation
needs no encoder, so only the decoder is built.

Module names follow the released ``movqgan_*.ckpt`` state dicts, so they load as saved:
``quantize.embedding.weight``, ``post_quant_conv.*``, ``decoder.conv_in``, ``decoder.mid.{block_1,
attn_1, block_2}``, ``decoder.up.{level}.block.{j}`` / ``.attn.{j}`` / ``.upsample.conv``,
``decoder.norm_out``, ``decoder.conv_out``; a modulated norm holds ``norm_layer``, ``conv_y``,
``conv_b``. The checkpoint's encoder, ``quant_conv`` and anything else are not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..core.errors import WeightsError


@dataclass(frozen=True)
class MoVQConfig:
    """A MoVQGAN decoder's shape: its ``ddconfig`` (``ch``, ``ch_mult``, ``num_res_blocks``,
    ``z_channels``), ``n_embed`` codes of ``embed_dim`` numbers, and ``attn_levels``: the levels (0:
    the finest) with attention after each block, which the released configs give as resolutions
    (``attn_resolutions=[32]`` of a 256 crop over four levels: the deepest, level 3)."""

    codes: int = 16384
    embed_dim: int = 4
    z_channels: int = 4
    ch: int = 256
    ch_mult: tuple[int, ...] = (1, 2, 2, 4)
    num_res_blocks: int = 2
    attn_levels: tuple[int, ...] = (3,)
    out_ch: int = 3

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)


MOVQGAN_270M = MoVQConfig()  # movqgan_270M.ckpt: 8x down, 16,384 codes of 4 numbers


def config_from_state(state: dict[str, torch.Tensor], what: str) -> MoVQConfig:
    """The shape of the decoder a state dict holds, read from its tensors' names and shapes (so the
    67M, 102M and 270M releases, and tiny test models, all load)."""
    try:
        codes, dim = state["quantize.embedding.weight"].shape
        levels = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("decoder.up."))
        chans = [state[f"decoder.up.{i}.block.0.conv2.weight"].shape[0] for i in range(levels)]
        blocks = {k.split(".")[4] for k in state if k.startswith("decoder.up.0.block.")}
        return MoVQConfig(
            codes=codes,
            embed_dim=dim,
            z_channels=state["post_quant_conv.weight"].shape[0],
            ch=chans[0],
            ch_mult=tuple(c // chans[0] for c in chans),
            num_res_blocks=len(blocks) - 1,
            attn_levels=tuple(i for i in range(levels) if f"decoder.up.{i}.attn.0.q.weight" in state),
            out_ch=state["decoder.conv_out.weight"].shape[0],
        )
    except (KeyError, ValueError) as e:
        raise WeightsError(f"{what} does not hold a MoVQGAN decoder (no {e})") from e


class SpatialNorm(nn.Module):
    """GroupNorm(32) of the features, scaled and shifted per pixel by 1x1 convolutions of the codes."""

    def __init__(self, channels: int, code_dim: int):
        super().__init__()
        self.norm_layer = nn.GroupNorm(32, channels, eps=1e-6)
        self.conv_y = nn.Conv2d(code_dim, channels, 1)
        self.conv_b = nn.Conv2d(code_dim, channels, 1)

    def forward(self, x, codes):
        codes = F.interpolate(codes, size=x.shape[-2:], mode="nearest")
        return self.norm_layer(x) * self.conv_y(codes) + self.conv_b(codes)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, code_dim: int):
        super().__init__()
        self.norm1 = SpatialNorm(cin, code_dim)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = SpatialNorm(cout, code_dim)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.nin_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, codes):
        h = self.conv1(F.silu(self.norm1(x, codes)))
        h = self.conv2(F.silu(self.norm2(h, codes)))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class AttnBlock(nn.Module):
    """One-head self-attention over all pixels, with 1x1-convolution projections."""

    def __init__(self, channels: int, code_dim: int):
        super().__init__()
        self.norm = SpatialNorm(channels, code_dim)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(channels, channels, 1) for _ in range(4))

    def forward(self, x, codes):
        b, c, h, w = x.shape
        y = self.norm(x, codes)
        q, k, v = (f(y).flatten(2).transpose(1, 2) for f in (self.q, self.k, self.v))  # [B, HW, C]
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, c, h, w)
        return x + self.proj_out(y)


class Upsample(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Level(nn.Module):
    """One resolution of the decoder: ``num_res_blocks + 1`` blocks (each followed by attention where
    the level has it), then a 2x upsampling on every level but the finest."""

    def __init__(self, cin: int, cout: int, cfg: MoVQConfig, attention: bool, upsample: bool):
        super().__init__()
        n = cfg.num_res_blocks + 1
        self.block = nn.ModuleList(ResBlock(cin if j == 0 else cout, cout, cfg.embed_dim) for j in range(n))
        self.attn = nn.ModuleList(AttnBlock(cout, cfg.embed_dim) for _ in range(n if attention else 0))
        self.upsample = Upsample(cout) if upsample else None

    def forward(self, x, codes):
        for j, block in enumerate(self.block):
            x = block(x, codes)
            if len(self.attn):
                x = self.attn[j](x, codes)
        return x if self.upsample is None else self.upsample(x)


class Mid(nn.Module):
    def __init__(self, channels: int, code_dim: int):
        super().__init__()
        self.block_1 = ResBlock(channels, channels, code_dim)
        self.attn_1 = AttnBlock(channels, code_dim)
        self.block_2 = ResBlock(channels, channels, code_dim)

    def forward(self, x, codes):
        return self.block_2(self.attn_1(self.block_1(x, codes), codes), codes)


class Decoder(nn.Module):
    def __init__(self, cfg: MoVQConfig):
        super().__init__()
        chans = [cfg.ch * m for m in cfg.ch_mult]
        self.conv_in = nn.Conv2d(cfg.z_channels, chans[-1], 3, padding=1)
        self.mid = Mid(chans[-1], cfg.embed_dim)
        # up[level]: level 0 is the finest; the deepest runs first and takes the widest input
        self.up = nn.ModuleList(
            Level(chans[min(i + 1, len(chans) - 1)], chans[i], cfg, i in cfg.attn_levels, upsample=i > 0)
            for i in range(len(chans))
        )
        self.norm_out = SpatialNorm(chans[0], cfg.embed_dim)
        self.conv_out = nn.Conv2d(chans[0], cfg.out_ch, 3, padding=1)

    def forward(self, z, codes):
        x = self.mid(self.conv_in(z), codes)
        for level in reversed(self.up):
            x = level(x, codes)
        return self.conv_out(F.silu(self.norm_out(x, codes)))


class Codebook(nn.Module):
    def __init__(self, cfg: MoVQConfig):
        super().__init__()
        self.embedding = nn.Embedding(cfg.codes, cfg.embed_dim)


class MoVQDecoder(nn.Module):
    """Code grids [B, H, W] (ids in [0, codes)) -> pixels [B, 3, H * d, W * d] in about [-1, 1] (d: 8 for
    the released models)."""

    def __init__(self, cfg: MoVQConfig = MOVQGAN_270M):
        super().__init__()
        self.config = cfg
        self.quantize = Codebook(cfg)
        self.post_quant_conv = nn.Conv2d(cfg.embed_dim, cfg.z_channels, 1)
        self.decoder = Decoder(cfg)

    @property
    def codebook(self) -> torch.Tensor:
        return self.quantize.embedding.weight

    def decode_codes(self, codes: torch.Tensor) -> torch.Tensor:
        quant = self.quantize.embedding(codes.to(self.codebook.device)).permute(0, 3, 1, 2)
        return self.decoder(self.post_quant_conv(quant), quant)


DECODER_KEYS = ("quantize.embedding.", "post_quant_conv.", "decoder.")


def load_movqgan(path: str | Path, device: str = "cpu", trust_checkpoint: bool = False) -> MoVQDecoder:
    """The decoder of a released MoVQGAN checkpoint (``movqgan_270M.ckpt``: a pickled state dict,
    read as plain tensors unless ``trust_checkpoint``), its shape read from the tensors. Every
    decoder tensor must be there; the encoder's, ``quant_conv`` and any others are ignored."""
    from .families.base import read_checkpoint
    from .transformer import check_finite

    path = Path(path)
    state = read_checkpoint(path, "MoVQGAN", trust_checkpoint)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):  # a Lightning training save
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise WeightsError(f"{path} is not a MoVQGAN state dict")
    ours = {k: v for k, v in state.items() if k.startswith(DECODER_KEYS)}
    with torch.device("meta"):  # the mapped file's tensors become the weights: no second copy
        model = MoVQDecoder(config_from_state(ours, str(path)))
    try:
        model.load_state_dict(ours, assign=True)
    except RuntimeError as e:
        raise WeightsError(f"{path} does not hold a MoVQGAN decoder of one shape: {e}") from e
    check_finite(ours, path)
    return model.float().to(device).eval()
