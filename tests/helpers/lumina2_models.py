"""Tiny Lumina-mGPT 2.0 checkpoints written in the released file layout, and their references.

The decoder's reference is transformers' Chameleon (``ChameleonForConditionalGeneration``):
Lumina-mGPT 2.0's ``lumina_mgpt/model/chameleon/modeling_chameleon.py`` is a copy of it whose only
change to the math is the q/k-norm parameters stored per model-parallel shard and repeated over
the heads (``ChameleonLayerNorm.repeat_param``), which the tiny models here reproduce by giving
every head of a shard the same row. The MoVQGAN decoder's reference is diffusers' ``VQModel`` with
``norm_type="spatial"`` (its MoVQ, written for Kandinsky 2.2), under its own key names.
"""

from __future__ import annotations

import json
import re

import torch

from jacobigen.models.families.chameleon import IMAGE_END, IMAGE_START, NEW_LINE, TURN_END, grid_token
from jacobigen.models.families.lumina2 import IMAGE_OFFSET
from jacobigen.models.movqgan import MoVQConfig, MoVQDecoder
from tests.helpers.family_models import WORDS, word_tokenizer

CODES = 16384
VOCAB = IMAGE_OFFSET + CODES + 8  # ids past the last image id, as a padded vocabulary has
EOS = "<|endoftext|>"
# where the release's code says its specials are (inference_solver.py: 151665 starts an image,
# 151666 ends it, 151670 ends a row); the rest follow
SPECIAL_IDS = {EOS: 151643, IMAGE_START: 151665, IMAGE_END: 151666, NEW_LINE: 151670, TURN_END: 151671}
TINY_MOVQ = MoVQConfig(codes=CODES, ch=32, ch_mult=(1, 1, 1, 1), num_res_blocks=1, attn_levels=(3,))


def tokenizer():
    """A word-level tokenizer with the release's special tokens at its ids and no BOS (a Qwen-style
    tokenizer: the prompt then starts with EOS, as xllmx's ``Tokenizer`` does)."""
    vocab = {"<unk>": 0}
    for w in WORDS + ["x", "\n"]:
        vocab[w] = len(vocab)
    vocab.update(SPECIAL_IDS)
    grids = [grid_token(n) for n in range(1, 33)]
    for i, g in enumerate(grids):
        vocab[g] = 151680 + i
    return word_tokenizer(vocab, list(SPECIAL_IDS) + grids, eos_token=EOS)


def chameleon(seed: int = 0, kv_heads: int = 2, swin: bool = False, theta: float = 10000.0, shards: int = 1):
    """A 2-layer transformers Chameleon over Lumina-mGPT 2.0's id space, with fan-in scaled random
    weights (peaked logits) and q/k norms equal within each of ``shards`` model-parallel shards."""
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    torch.manual_seed(seed)
    cfg = ChameleonConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=10240,  # a 768 px image takes 9,313 tokens
        rope_theta=theta,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
        swin_norm=swin,
        model_parallel_size=shards,
        vocabulary_map={"<image>": 8},
        vq_config=dict(embed_dim=8, num_embeddings=16, latent_channels=8, base_channels=32, channel_multiplier=[1, 1]),
    )
    cfg._attn_implementation = "eager"
    hf = ChameleonForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if ".self_attn." in name and "_norm." in name:  # [heads, head_dim]: one row per shard
                rows = (
                    1.0 + 0.5 * torch.randn(shards, p.shape[1])
                    if name.endswith("weight")
                    else 0.3 * torch.randn(shards, p.shape[1])
                )
                p.copy_(rows.repeat_interleave(p.shape[0] // shards, 0))
            elif p.dim() == 2:
                p.normal_(0, p.shape[1] ** -0.5)
            elif "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    return hf


def release_state(hf) -> dict[str, torch.Tensor]:
    """The decoder's tensors as Lumina-mGPT 2.0 saves them: transformers' Chameleon names, q/k norms
    as [model_parallel_size, head_dim], no Chameleon VQ."""
    shards = hf.config.model_parallel_size
    out = {}
    for k, v in hf.state_dict().items():
        if k.startswith("model.vqmodel."):
            continue
        if re.search(r"\.self_attn\.[qk]_norm\.", k):
            v = v[:: v.shape[0] // shards]
        out[k] = v.detach().clone().contiguous()
    return out


def movq(seed: int = 1, cfg: MoVQConfig = TINY_MOVQ) -> MoVQDecoder:
    """A MoVQGAN decoder with random weights everywhere (norms and modulations included)."""
    torch.manual_seed(seed)
    m = MoVQDecoder(cfg).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm_layer" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.3 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.normal_(0, 0.1)
        m.quantize.embedding.weight.normal_()
    return m


def release_movq_state(m: MoVQDecoder) -> dict[str, torch.Tensor]:
    """The decoder's tensors plus encoder-side ones, as ``movqgan_270M.ckpt`` holds them (the
    loader must ignore ``encoder.*`` and ``quant_conv.*``)."""
    state = {k: v.detach().clone() for k, v in m.state_dict().items()}
    state["encoder.conv_in.weight"] = torch.randn(m.config.ch, 3, 3, 3)
    state["quant_conv.weight"] = torch.randn(m.config.embed_dim, m.config.z_channels, 1, 1)
    return state


def write_checkpoint(directory, hf, vq: MoVQDecoder | None = None, shards: int = 2, vq_place: str = "") -> None:
    """``directory`` in the layout of ``Alpha-VLLM/Lumina-mGPT-2.0`` on the hub: ``config.json``,
    ``model-0000i-of-0000n.safetensors`` with ``model.safetensors.index.json``, the tokenizer files,
    and (ours to place, as its README asks) ``movqgan_270M.ckpt`` under ``vq_place``."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = release_state(hf)
    keys = list(state)
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    where = {k: names[min(i * shards // len(keys), shards - 1)] for i, k in enumerate(keys)}
    for name in names:
        save_file({k: state[k] for k in keys if where[k] == name}, str(directory / name), metadata={"format": "pt"})
    total = sum(v.numel() * v.element_size() for v in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": where}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    config = hf.config.to_dict()  # as transformers 4 wrote it for the release: RoPE at the top level
    config.update(architectures=["ChameleonForConditionalGeneration"], rope_scaling=None)
    config["rope_theta"] = config.pop("rope_parameters")["rope_theta"]
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer().save_pretrained(directory)
    if vq is not None:
        place = directory / vq_place
        place.mkdir(parents=True, exist_ok=True)
        torch.save(release_movq_state(vq), place / "movqgan_270M.ckpt")


# --- diffusers' MoVQ, the pixels' reference ----------------------------------------------------------


def diffusers_movq(m: MoVQDecoder):
    """diffusers' ``VQModel(norm_type="spatial")`` of ``m``'s shape holding ``m``'s weights, moved
    from the released names to diffusers' (``up.{level}`` counts from the finest level, diffusers'
    ``up_blocks`` from the deepest; attention's 1x1 convolutions are its linear layers)."""
    from diffusers import VQModel

    cfg = m.config
    n = len(cfg.ch_mult)
    ref = VQModel(
        in_channels=3,
        out_channels=cfg.out_ch,
        down_block_types=("DownEncoderBlock2D",) * n,
        up_block_types=tuple(
            "AttnUpDecoderBlock2D" if n - 1 - k in cfg.attn_levels else "UpDecoderBlock2D" for k in range(n)
        ),
        block_out_channels=tuple(cfg.ch * c for c in cfg.ch_mult),
        layers_per_block=cfg.num_res_blocks,
        latent_channels=cfg.z_channels,
        num_vq_embeddings=cfg.codes,
        vq_embed_dim=cfg.embed_dim,
        norm_num_groups=32,
        norm_type="spatial",
    ).eval()
    state = {}
    for k, v in m.state_dict().items():
        k = k.replace("decoder.mid.block_1.", "decoder.mid_block.resnets.0.")
        k = k.replace("decoder.mid.block_2.", "decoder.mid_block.resnets.1.")
        k = k.replace("decoder.mid.attn_1.", "decoder.mid_block.attentions.0.")
        found = re.match(r"decoder\.up\.(\d+)\.(block|attn|upsample)\.(.*)", k)
        if found:
            level, kind, rest = found.groups()
            kind = {"block": "resnets", "attn": "attentions", "upsample": "upsamplers.0"}[kind]
            k = f"decoder.up_blocks.{n - 1 - int(level)}.{kind}.{rest}"
        k = k.replace("decoder.norm_out.", "decoder.conv_norm_out.").replace(".nin_shortcut.", ".conv_shortcut.")
        if "attentions." in k:
            k = k.replace(".norm.", ".spatial_norm.")
            for ours, theirs in (("q", "to_q"), ("k", "to_k"), ("v", "to_v"), ("proj_out", "to_out.0")):
                if re.search(rf"\.{ours}\.(weight|bias)$", k):
                    k = re.sub(rf"\.{ours}\.(weight|bias)$", rf".{theirs}.\1", k)
                    v = v.flatten(1) if v.dim() == 4 else v
        state[k] = v
    missing, unexpected = ref.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all(k.startswith(("encoder.", "quant_conv.")) for k in missing), missing
    return ref


def diffusers_decode(ref, codes: torch.Tensor) -> torch.Tensor:
    """Pixels of code grids [B, H, W] through diffusers' MoVQ (codebook rows as latents, not re-quantized)."""
    quant = ref.quantize.embedding(codes).permute(0, 3, 1, 2)
    return ref.decode(quant, force_not_quantize=True).sample
