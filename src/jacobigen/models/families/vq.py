"""VQ decoders for the families whose transformers classes lack one: Chameleon's VQGAN and LlamaGen's VQ-16.

Both are taming-style convolutional decoders (conv_in, mid block with one attention, up levels of
res blocks, norm_out, conv_out). transformers' ``JanusVQVAEDecoder`` implements that architecture
(Janus itself uses LlamaGen's VQ-16), so we reuse it and only translate checkpoint key names:

- LlamaGen ``decoder.conv_blocks.{i}.res/attn/upsample`` -> ``up.{i}.block/attn/upsample``,
  ``decoder.mid.{0,1,2}`` -> ``mid.block_1/attn_1/block_2``; l2-normalised codebook.
- taming (Chameleon ``vqgan.ckpt``) lists ``up`` levels from the highest resolution, the reverse of
  Janus, and has no attention in the up levels (``attn_resolutions: []``).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ...core.errors import WeightsError
from .base import mapped_bytes, read_checkpoint


class VQDecoder(nn.Module):
    """codes [B, h, w] -> pixels [B, 3, 16h, 16w] in [-1, 1]."""

    def __init__(
        self,
        codebook_size: int,
        embed_dim: int,
        z_channels: int = 256,
        base_channels: int = 128,
        channel_multiplier=(1, 1, 2, 2, 4),
        num_res_blocks: int = 2,
        l2_norm: bool = False,
        up_attention: bool = True,
    ):
        super().__init__()
        from transformers.models.janus.configuration_janus import JanusVQVAEConfig
        from transformers.models.janus.modeling_janus import JanusVQVAEDecoder

        cfg = JanusVQVAEConfig(
            embed_dim=embed_dim,
            num_embeddings=codebook_size,
            latent_channels=z_channels,
            base_channels=base_channels,
            channel_multiplier=list(channel_multiplier),
            num_res_blocks=num_res_blocks,
            out_channels=3,
            dropout=0.0,
        )
        self.embedding = nn.Embedding(codebook_size, embed_dim)
        self.post_quant_conv = nn.Conv2d(embed_dim, z_channels, 1)
        self.decoder = JanusVQVAEDecoder(cfg)
        if not up_attention:
            for level in self.decoder.up:
                level.attn = nn.ModuleList()
        self.l2_norm = l2_norm

    def decode_codes(self, codes: torch.Tensor) -> torch.Tensor:
        p = self.embedding.weight
        table = F.normalize(p, dim=-1) if self.l2_norm else p
        z = table[codes.to(p.device)].permute(0, 3, 1, 2)
        return self.decoder(self.post_quant_conv(z))


def infer_arch(state: dict) -> dict:
    """Decoder shape from a (mapped) state dict, so that any VQ-16 variant loads without a config."""
    levels = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("decoder.up."))
    blocks = 1 + max(int(k.split(".")[4]) for k in state if k.startswith("decoder.up.0.block."))
    base = state["decoder.conv_out.weight"].shape[1]
    mult = [state[f"decoder.up.{levels - 1 - i}.block.0.conv1.weight"].shape[0] // base for i in range(levels)]
    attention = any(".attn." in k for k in state if k.startswith("decoder.up."))
    return dict(
        z_channels=state["decoder.conv_in.weight"].shape[1],
        base_channels=base,
        channel_multiplier=mult,
        num_res_blocks=blocks - 1,
        up_attention=attention,
    )


def _load_checked(model: nn.Module, state: dict, source: Path) -> nn.Module:
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing:
        raise WeightsError(f"VQ decoder weights in {source} lack {len(missing)} tensors, e.g. {missing[:3]}")
    return model.eval()


# --- LlamaGen VQ-16 -------------------------------------------------------------------------------


def _shared_key(k: str) -> tuple[bool, str | None]:
    """Keys both VQGAN layouts name alike: (handled, mapped key or None if not needed to decode)."""
    if k == "quantize.embedding.weight":
        return True, "embedding.weight"
    if k.startswith("post_quant_conv."):
        return True, k
    return not k.startswith("decoder."), None


def llamagen_to_janus_key(k: str) -> str | None:
    """LlamaGen VQModel key -> VQDecoder key (None: not needed to decode)."""
    handled, mapped = _shared_key(k)
    if handled:
        return mapped
    k = re.sub(r"^decoder\.conv_blocks\.(\d+)\.res\.", r"decoder.up.\1.block.", k)
    k = re.sub(r"^decoder\.conv_blocks\.(\d+)\.", r"decoder.up.\1.", k)
    for i, name in enumerate(("block_1", "attn_1", "block_2")):
        k = k.replace(f"decoder.mid.{i}.", f"decoder.mid.{name}.")
    return k


def load_llamagen_vq(path: Path, device: str = "cpu", trust_checkpoint: bool = False, **arch) -> VQDecoder:
    """LlamaGen ``vq_ds16_c2i.pt`` / ``vq_ds16_t2i.pt`` (a dict with ``model``, or the state dict)."""
    state = read_checkpoint(path, "VQ", trust_checkpoint)
    state = state.get("model", state)
    mapped = {nk: v for k, v in state.items() if (nk := llamagen_to_janus_key(k))}
    emb = mapped.get("embedding.weight")
    if emb is None:
        raise WeightsError(f"{path} holds no LlamaGen VQ codebook (quantize.embedding.weight)")
    model = VQDecoder(emb.shape[0], emb.shape[1], l2_norm=True, **{**infer_arch(mapped), **arch})
    return _load_checked(model, mapped, path).to(device)


# --- Chameleon VQGAN ------------------------------------------------------------------------------


def find_chameleon_vqgan(root: Path) -> Path | None:
    for rel in ("vqgan.ckpt", "tokenizer/vqgan.ckpt", "vqgan/vqgan.ckpt", "chameleon/tokenizer/vqgan.ckpt"):
        if (root / rel).is_file():
            return root / rel
    return None


def chameleon_vqgan_bytes(root: Path) -> int:
    """Bytes of the VQGAN decoder :func:`load_chameleon_vqgan` keeps (float32), from the memory-mapped
    file (the memory plan counts it; the encoder is never read)."""
    ckpt = find_chameleon_vqgan(root)
    return 0 if ckpt is None else mapped_bytes(ckpt, lambda k: taming_to_janus_key(k, 1))


def taming_to_janus_key(k: str, levels: int) -> str | None:
    handled, mapped = _shared_key(k)
    if handled:
        return mapped
    m = re.match(r"^decoder\.up\.(\d+)\.(.*)$", k)
    return f"decoder.up.{levels - 1 - int(m.group(1))}.{m.group(2)}" if m else k


def load_chameleon_vqgan(path: Path, device: str = "cpu", trust_checkpoint: bool = False) -> VQDecoder:
    """Meta's Chameleon ``vqgan.ckpt`` (Lightning checkpoint); the architecture is read off the shapes.
    Only taming decoders without up-level attention (Chameleon's ``attn_resolutions: []``) map onto
    Janus' layout; one with up-level attention would need its attention at other levels."""
    state = read_checkpoint(path, "VQGAN", trust_checkpoint)
    state = state.get("state_dict", state)
    ups = [int(k.split(".")[2]) for k in state if k.startswith("decoder.up.")]
    if not ups:
        raise WeightsError(f"{path} holds no VQGAN decoder (decoder.up.*)")
    mapped = {nk: v for k, v in state.items() if (nk := taming_to_janus_key(k, 1 + max(ups)))}
    emb = mapped.get("embedding.weight")
    if emb is None:
        raise WeightsError(f"{path} holds no VQGAN codebook (quantize.embedding.weight)")
    model = VQDecoder(emb.shape[0], emb.shape[1], l2_norm=False, **infer_arch(mapped))
    return _load_checked(model, mapped, path).to(device)
