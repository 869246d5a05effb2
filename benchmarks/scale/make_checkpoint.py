"""A seeded random checkpoint at a family's published shape, in its released on-disk format, so that
``--model FAMILY:DIR`` loads it: the load path and the plan are then measured at the size users run.

    python benchmarks/scale/make_checkpoint.py --family janus --shape janus-pro-1b --out /work/scale-ckpt/janus-pro-1b

Families and shapes (``--list``): ``janus`` (transformers' Janus format, as ``deepseek-community/
Janus-Pro-*``: ``config.json``, ``generation_config.json``, sharded safetensors under
``model.safetensors.index.json``, every tensor of the model, vision encoder included) and ``lumina2``
(``Alpha-VLLM/Lumina-mGPT-2.0``'s layout: transformers 4's Chameleon ``config.json``, shards of
transformers' Chameleon names with q/k norms per model-parallel shard, ``movqgan_270M.ckpt``),
``chameleon`` (``lumina-mgpt-7b``: Lumina-mGPT-7B-768's ``config.json`` with its vocabulary map, the
same shards, Chameleon's VQGAN in ``tokenizer/vqgan.ckpt``), ``llamagen`` (``llamagen-xl``: LlamaGen's
``c2i_XL_384.pt`` at float32 and ``vq_ds16_c2i.pt``), ``cosmos`` (``cosmos-4b``:
Cosmos-1.0-Autoregressive-4B's ``model.pt``, bf16, keys under ``model.``) and ``emu3`` (``emu3-gen``:
Emu3-Gen-hf's ``config.json`` and vocabulary map, shards of ``text_model.*`` and ``vqmodel.*``; no image
processor config, so pixels decode from [-1, 1]). Each has a ``tiny`` shape for the test suite.
Tokenizers are word-level with the family's special tokens at the ids its loader reads (the released
BPE vocabularies are not ours to ship).

Weights are fan-in scaled normals in bf16 (norms 1), written one shard at a time: the writer holds at
most one shard (``--shard-gb``) and one tensor. A ``.pt`` file is one pickle: its writer holds the
whole state dict (``cosmos-4b``: 7.5 GiB; ``llamagen-xl``: 2.9 GiB at float32).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import torch

from jacobigen.models.releases import JANUS_TEXT, RELEASES

# the published shapes come from jacobigen.models.releases (what `jacobigen plan --shape` plans); the
# tiny ones are the test suite's
SHAPES = {
    "janus": {
        # transformers' JanusConfig defaults are Janus-Pro-1B's vision and VQ parts (SigLIP-L 384 px,
        # the 16,384-code VQ); the language models are DeepSeek-LLM-1.5B / -7B
        "janus-pro-1b": dict(text=RELEASES["janus-pro-1b"].config["text_config"]),
        "janus-pro-7b": dict(text=RELEASES["janus-pro-7b"].config["text_config"]),
        "tiny": dict(text=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2),
                     vision=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=64,
                                 num_image_tokens=16, mlp_ratio=2.0),
                     vq=dict(embed_dim=8, num_embeddings=64, latent_channels=32, base_channels=32,
                             channel_multiplier=[1, 1], num_res_blocks=1)),
    },
    "lumina2": {
        # Lumina-mGPT 2.0: Chameleon-7B's stack over a 172,032-id vocabulary (Qwen's text ids, then
        # MoVQGAN's 16,384 codes from 155,000), q/k norms stored per model-parallel shard
        "lumina2-7b": dict(RELEASES["lumina2-7b"].config, movq="270M"),
        "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=171392, movq="tiny"),
        # the suite's load-peak test: embedding and head (88 MB each in bf16) dwarf the process' noise
        "peak-test": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=171392, movq="tiny"),
    },
    "chameleon": {
        # Lumina-mGPT-7B-768 (Alpha-VLLM): Chameleon-7B's stack, 65,536 ids of which 8,192 VQGAN codes
        # (ids 4..8195), positions for a 1024-px image, q/k norms per model-parallel shard; Chameleon's
        # VQGAN (ddconfig z 256, ch 128, ch_mult 1,1,2,2,4, 2 res blocks) in tokenizer/vqgan.ckpt
        "lumina-mgpt-7b": dict(RELEASES["lumina-mgpt-7b"].config,
                               vq=dict(z=256, ch=128, mult=(1, 1, 2, 2, 4), blocks=2, embed=256)),
        "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=8400, max_position_embeddings=4096,
                     vq=dict(z=32, ch=32, mult=(1, 1, 2, 2, 4), blocks=1, embed=8)),
        # the suite's load-peak test: embedding and head dwarf the process' noise; no VQGAN (not planned)
        "peak-test": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=171392, max_position_embeddings=4096, vq=None),
    },
    "llamagen": {
        # LlamaGen c2i GPT-XL at 384 px (c2i_XL_384.pt, float32 as released): 36 layers of 1280, 20 heads,
        # 16,384 VQ codes, 1000 classes + the null label; its VQ-16 (vq_ds16_c2i.pt) beside it
        "llamagen-xl": dict(name="XL", **RELEASES["llamagen-xl-384"].config, size=RELEASES["llamagen-xl-384"].size,
                            classes=1000, vq=dict(z=256, ch=128, mult=(1, 1, 2, 2, 4), blocks=2, embed=8)),
        "tiny": dict(name="tiny", dim=64, n_layer=2, n_head=4, size=64, classes=10,
                     vq=dict(z=32, ch=32, mult=(1, 1, 2, 2, 4), blocks=1, embed=8)),
    },
    "cosmos": {
        # Cosmos-1.0-Autoregressive-4B (model.pt, bf16): 16 layers of 4096, 32 heads of 128, 8 K/V heads,
        # MLP 14336, 64,000 FSQ codes, per-head q/k RMSNorm; no decoder.jit (clips preview the codes)
        "cosmos-4b": dict(release="cosmos-4b"),
        "tiny": dict(dim=48, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=12, ffn=96, vocab=64000,
                     latent_shape=[3, 2, 3]),
    },
    "emu3": {
        # Emu3-Gen (BAAI/Emu3-Gen-hf): transformers' Emu3Config defaults are its published shape (text model
        # 32 layers of 4096, 8 K/V heads, MLP 14336, 184,622 ids whose last 32,768 are visual tokens; the
        # 32,768-code temporal VQ-VAE), stored as text_model.model.*, text_model.lm_head, vqmodel.*
        "emu3-gen": dict(text=RELEASES["emu3-gen"].config.get("text_config", {}), vq={},
                         ids=dict(pad=151643, eol=151846, eof=151847, bos=151849, eos=151850,
                                  boi=151851, eoi=151852, wrapper=151853)),
        "tiny": dict(text=dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512),
                     vq=dict(codebook_size=64, embed_dim=4, latent_channels=4, base_channels=32,
                             channel_multiplier=[1, 2], num_res_blocks=1, attn_resolutions=[], hidden_size=64,
                             num_attention_heads=1, temporal_downsample_factor=4),
                     ids=dict(pad=1, eol=2, eof=3, bos=4, eos=5, boi=6, eoi=7, wrapper=8)),
    },
}  # fmt: skip
WORDS = "a red fox cat on the mat Generate an image of according to following prompt : User Assistant x".split()


def word_tokenizer(vocab: dict[str, int], specials: list[str], **named):
    """A whitespace WordLevel tokenizer over ``vocab`` whose ``specials`` split out of any text."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", **named)
    fast.add_special_tokens({"additional_special_tokens": specials})
    return fast


def random_tensor(key: str, shape: tuple[int, ...], seed: int, index: int) -> torch.Tensor:
    """Norm weights 1, biases and 1-D tensors small, matrices fan-in scaled: finite, peaked logits."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)
    if key.endswith(("running_mean", "running_var", "num_batches_tracked")):  # a BatchNorm's statistics
        fill = 1.0 if key.endswith("running_var") else 0.0
        return torch.full(shape, fill, dtype=torch.int64 if key.endswith("tracked") else torch.bfloat16)
    if len(shape) == 1 or key.endswith("bias"):
        base = 1.0 if "norm" in key and key.endswith("weight") else 0.0
        return (base + 0.02 * torch.randn(shape, generator=g)).to(torch.bfloat16)
    fan_in = math.prod(shape[1:])
    std = 1.0 if "embed" in key else fan_in**-0.5
    return torch.randn(shape, generator=g, dtype=torch.bfloat16).mul_(std)


def write_shards(out: Path, tensors: list[tuple[str, tuple[int, ...]]], seed: int, shard_gb: float) -> int:
    """``tensors`` (name, shape) as ``model-0000i-of-0000n.safetensors`` + the index; returns the bytes."""
    from safetensors.torch import save_file

    limit = int(shard_gb * 2**30)
    groups: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in tensors:
        n = math.prod(shape) * 2
        if groups[-1] and size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append((name, shape))
        size += n
    where, total, index = {}, 0, 0
    for i, group in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        shard = {}
        for name, shape in group:
            shard[name] = random_tensor(name, shape, seed, index)
            index += 1
            where[name] = file
            total += shard[name].numel() * 2
        save_file(shard, str(out / file), metadata={"format": "pt"})
        del shard
        print(f"  {file}: {len(group)} tensors", file=sys.stderr)
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": where}, indent=2)
    )
    return total


def chameleon_tensors(spec: dict) -> list[tuple[str, tuple[int, ...]]]:
    """transformers' Chameleon names and shapes, q/k norms per model-parallel shard (one: [1, head_dim])."""
    layers, heads, kv, dim = (spec[k] for k in ("num_hidden_layers", "num_attention_heads",
                                                "num_key_value_heads", "hidden_size"))  # fmt: skip
    head_dim, ffn, vocab_size = dim // heads, spec["intermediate_size"], spec["vocab_size"]
    tensors = [("model.embed_tokens.weight", (vocab_size, dim))]
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors += [
            (p + "input_layernorm.weight", (dim,)),
            (p + "self_attn.q_proj.weight", (heads * head_dim, dim)),
            (p + "self_attn.k_proj.weight", (kv * head_dim, dim)),
            (p + "self_attn.v_proj.weight", (kv * head_dim, dim)),
            (p + "self_attn.o_proj.weight", (dim, heads * head_dim)),
            *[(p + f"self_attn.{n}_norm.{w}", (1, head_dim)) for n in "qk" for w in ("weight", "bias")],
            (p + "post_attention_layernorm.weight", (dim,)),
            (p + "mlp.gate_proj.weight", (ffn, dim)),
            (p + "mlp.up_proj.weight", (ffn, dim)),
            (p + "mlp.down_proj.weight", (dim, ffn)),
        ]
    return tensors + [("model.norm.weight", (dim,)), ("lm_head.weight", (vocab_size, dim))]


def vq_decoder(arch: dict, codes: int, seed: int, l2_norm: bool = False):
    """A random VQ-16 decoder (jacobigen's, in Janus' layout) of ``arch`` (z, ch, mult, blocks, embed)."""
    from jacobigen.models.families.vq import VQDecoder

    torch.manual_seed(seed)
    return VQDecoder(codes, arch["embed"], arch["z"], arch["ch"], arch["mult"], arch["blocks"], l2_norm=l2_norm,
                     up_attention=False).eval()  # fmt: skip


def vq_state(vq, levels: int, taming: bool) -> dict[str, torch.Tensor]:
    """Its decoder's tensors under the release's names: taming's (Chameleon's ``vqgan.ckpt``: up levels
    from the highest resolution) or LlamaGen's (``decoder.conv_blocks.{i}.res``, ``mid.{0,1,2}``)."""
    out = {}
    for k, v in vq.state_dict().items():
        k = "quantize.embedding.weight" if k == "embedding.weight" else k
        if taming:
            k = re.sub(r"^decoder\.up\.(\d+)\.", lambda m: f"decoder.up.{levels - 1 - int(m.group(1))}.", k)
        else:
            k = re.sub(r"^decoder\.up\.(\d+)\.block\.", r"decoder.conv_blocks.\1.res.", k)
            k = re.sub(r"^decoder\.up\.(\d+)\.", r"decoder.conv_blocks.\1.", k)
            for i, name in enumerate(("block_1", "attn_1", "block_2")):
                k = k.replace(f"decoder.mid.{name}.", f"decoder.mid.{i}.")
        out[k] = v.detach().clone()
    return out


def janus(spec: dict, out: Path, seed: int, shard_gb: float) -> None:
    from transformers import GenerationConfig, JanusConfig, JanusForConditionalGeneration

    text = dict(JANUS_TEXT)
    tiny = "vq" in spec  # the suite's shape: a vocabulary of 64 ids
    if tiny:
        text.update(vocab_size=64, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    text.update(spec["text"])
    dim = text["hidden_size"]
    pad, bos, eos = "<｜▁pad▁｜>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
    vocab = {bos: text["bos_token_id"], eos: text["eos_token_id"], pad: text["pad_token_id"], "<unk>": 3}
    specials = ["<begin_of_image>", "<|User|>", "<|Assistant|>", "<image_placeholder>"]
    first = 4 if tiny else 100016  # Janus' tokenizer: <begin_of_image> is 100016
    vocab.update({s: first + i for i, s in enumerate(specials)})
    vocab.update({w: (8 if tiny else 4) + i for i, w in enumerate(WORDS)})
    cfg = JanusConfig(
        text_config=text,
        vision_config=dict(projection_dim=dim, **spec.get("vision", {})),
        vq_config=dict(projection_dim=dim, image_token_embed_dim=dim, **spec.get("vq", {})),
        image_token_id=vocab["<image_placeholder>"],
    )
    with torch.device("meta"):
        hf = JanusForConditionalGeneration(cfg)
    tensors = [(k, tuple(v.shape)) for k, v in hf.state_dict().items()]
    total = write_shards(out, tensors, seed, shard_gb)
    cfg.save_pretrained(out)
    gen = GenerationConfig(pad_token_id=text["pad_token_id"], bos_token_id=text["bos_token_id"],
                           eos_token_id=text["eos_token_id"],
                           generation_kwargs={"boi_token_id": vocab["<begin_of_image>"]})  # fmt: skip
    gen.save_pretrained(out)
    word_tokenizer(vocab, specials, bos_token=bos, eos_token=eos, pad_token=pad).save_pretrained(out)
    print(f"janus: {total / 2**30:.2f} GiB of bf16 tensors in {out}", file=sys.stderr)


def lumina2(spec: dict, out: Path, seed: int, shard_gb: float) -> None:
    from jacobigen.models.families.chameleon import IMAGE_END, IMAGE_START, NEW_LINE, TURN_END, grid_token
    from jacobigen.models.movqgan import MOVQGAN_270M, MoVQConfig, MoVQDecoder

    spec = dict(spec)
    tiny = MoVQConfig(codes=16384, ch=32, ch_mult=(1, 1, 1, 1), num_res_blocks=1, attn_levels=(3,))
    movq = MOVQGAN_270M if spec.pop("movq") == "270M" else tiny
    tensors = chameleon_tensors(spec)
    total = write_shards(out, tensors, seed, shard_gb)
    config = dict(architectures=["ChameleonForConditionalGeneration"], model_type="chameleon", hidden_act="silu",
                  max_position_embeddings=10240, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None,
                  model_parallel_size=1, swin_norm=False, tie_word_embeddings=False, attention_bias=False,
                  qk_layernorms=True, torch_dtype="bfloat16")  # fmt: skip
    config.update(spec)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    # the ids Lumina-mGPT 2.0's inference code reads (its Qwen tokenizer's EOS and image specials)
    vocab = {"<unk>": 0, "<|endoftext|>": 151643, IMAGE_START: 151665, IMAGE_END: 151666, NEW_LINE: 151670,
             TURN_END: 151671}  # fmt: skip
    specials = [k for k in vocab if k != "<unk>"] + [grid_token(n) for n in range(1, 33)]
    vocab.update({grid_token(n): 151680 + n - 1 for n in range(1, 33)})
    vocab.update({w: i for i, w in enumerate(WORDS, start=1)})
    word_tokenizer(vocab, specials, eos_token="<|endoftext|>").save_pretrained(out)
    torch.manual_seed(seed)
    vq = MoVQDecoder(movq)
    torch.save({k: v.detach().clone() for k, v in vq.state_dict().items()}, out / "movqgan_270M.ckpt")
    print(f"lumina2: {total / 2**30:.2f} GiB of bf16 tensors in {out}", file=sys.stderr)


def chameleon(spec: dict, out: Path, seed: int, shard_gb: float) -> None:
    from jacobigen.models.families.chameleon import IMAGE_END, IMAGE_START, NEW_LINE, TURN_END, grid_token

    spec = dict(spec)
    arch = spec.pop("vq")
    codes = 8192
    total = write_shards(out, chameleon_tensors(spec), seed, shard_gb)
    # Chameleon's vocabulary: <s> 0, <pad> 1, </s> 2, <unk> 3, the VQGAN codes as IMGIMG<code in letters>Z
    # from 4, then the specials; the rest are text ids (the word tokenizer's)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab_map = dict(vocab)
    for c in range(codes):
        vocab_map["IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(c)) + "Z"] = 4 + c
    specials = [IMAGE_END, IMAGE_START, NEW_LINE, TURN_END] + [grid_token(n) for n in range(1, 33)]
    vocab.update({t: 4 + codes + i for i, t in enumerate(specials)})
    vocab.update({w: 4 + codes + len(specials) + i for i, w in enumerate(WORDS)})
    vocab_map.update(vocab)
    config = dict(architectures=["ChameleonXLLMXForConditionalGeneration"], model_type="chameleon",
                  hidden_act="silu", rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None, model_parallel_size=1,
                  swin_norm=False, qk_layernorm=True, attention_bias=False, tie_word_embeddings=False, bos_token_id=0,
                  pad_token_id=1, eos_token_id=2, torch_dtype="bfloat16", vocabulary_map=vocab_map)  # fmt: skip
    config.update(spec)
    if arch:
        config["vq_config"] = dict(embed_dim=arch["embed"], num_embeddings=codes, latent_channels=arch["z"],
                                   base_channels=arch["ch"], channel_multiplier=list(arch["mult"]),
                                   num_res_blocks=arch["blocks"], attn_resolutions=[])  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=2))
    word_tokenizer(vocab, specials, bos_token="<s>", eos_token="</s>", pad_token="<pad>").save_pretrained(out)
    if not arch:
        print(f"chameleon: {total / 2**30:.2f} GiB of bf16 tensors in {out} (no VQGAN)", file=sys.stderr)
        return
    (out / "tokenizer").mkdir(exist_ok=True)
    vq = vq_decoder(arch, codes, seed)
    torch.save({"state_dict": vq_state(vq, len(arch["mult"]), taming=True)}, out / "tokenizer" / "vqgan.ckpt")
    print(f"chameleon: {total / 2**30:.2f} GiB of bf16 tensors in {out}", file=sys.stderr)


def llamagen(spec: dict, out: Path, seed: int, shard_gb: float) -> None:
    """LlamaGen's c2i release: ``{"model": state}`` at float32 in ``c2i_{name}_{size}.pt`` (its name states
    the size), ``vq_ds16_c2i.pt`` beside it and, for what the loader cannot infer (heads, a size that no
    release has), ``llamagen.json``."""
    from jacobigen.models.families.llamagen import HEADS, SIZES
    from jacobigen.models.families.llamagen_model import LlamaGenConfig

    c = LlamaGenConfig(dim=spec["dim"], n_layer=spec["n_layer"], n_head=spec["n_head"], num_classes=spec["classes"],
                       block_size=(spec["size"] // 16) ** 2)  # fmt: skip
    dim, hd, hidden = c.dim, c.head_dim, c.hidden_dim
    tensors = [("tok_embeddings.weight", (c.vocab_size, dim)), ("cls_embedding.embedding_table.weight",
               (c.num_classes + 1, dim))]  # fmt: skip
    for i in range(c.n_layer):
        p = f"layers.{i}."
        qkv = (c.n_head + 2 * c.kv_heads) * hd
        tensors += [(p + "attention_norm.weight", (dim,)), (p + "attention.wqkv.weight", (qkv, dim)),
                    (p + "attention.wo.weight", (dim, dim)), (p + "ffn_norm.weight", (dim,)),
                    (p + "feed_forward.w1.weight", (hidden, dim)), (p + "feed_forward.w3.weight", (hidden, dim)),
                    (p + "feed_forward.w2.weight", (dim, hidden))]  # fmt: skip
    tensors += [("norm.weight", (dim,)), ("output.weight", (c.vocab_size, dim))]
    state = {k: random_tensor(k, shape, seed, i).float() for i, (k, shape) in enumerate(tensors)}
    torch.save({"model": state}, out / f"c2i_{spec['name']}_{spec['size']}.pt")
    total = sum(v.numel() * 4 for v in state.values())
    del state
    if HEADS.get(dim) != c.n_head or spec["size"] not in SIZES:
        (out / "llamagen.json").write_text(json.dumps({"n_head": c.n_head, "block_size": c.block_size}))
    vq = vq_decoder(spec["vq"], c.vocab_size, seed, l2_norm=True)
    torch.save({"model": vq_state(vq, len(spec["vq"]["mult"]), taming=False)}, out / "vq_ds16_c2i.pt")
    print(f"llamagen: {total / 2**30:.2f} GiB of float32 tensors in {out}", file=sys.stderr)


def cosmos(spec: dict, out: Path, seed: int, shard_gb: float) -> None:
    """Cosmos' ``model.pt``: its state dict under ``model.``, bf16; ``cosmos.json`` for a latent shape
    other than the release's."""
    if "release" in spec:  # a published shape: its config as jacobigen.models.releases states it
        from jacobigen.models.families.cosmos import CosmosConfig

        c = CosmosConfig(**RELEASES[spec["release"]].config)
        spec = dict(dim=c.dim, n_layers=c.n_layers, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, head_dim=c.hd,
                    ffn=c.ffn_dim, vocab=c.vocab_size)  # fmt: skip
    dim, hd, heads, kv, ffn = (spec[k] for k in ("dim", "head_dim", "n_heads", "n_kv_heads", "ffn"))
    tensors = [("model.tok_embeddings.weight", (spec["vocab"], dim))]
    for i in range(spec["n_layers"]):
        p = f"model.layers.{i}."
        tensors += [(p + "attention_norm.weight", (dim,)), (p + "attention.wq.weight", (heads * hd, dim)),
                    (p + "attention.wk.weight", (kv * hd, dim)), (p + "attention.wv.weight", (kv * hd, dim)),
                    (p + "attention.wo.weight", (dim, heads * hd)), (p + "attention.q_norm.weight", (hd,)),
                    (p + "attention.k_norm.weight", (hd,)), (p + "ffn_norm.weight", (dim,)),
                    (p + "feed_forward.w1.weight", (ffn, dim)), (p + "feed_forward.w3.weight", (ffn, dim)),
                    (p + "feed_forward.w2.weight", (dim, ffn))]  # fmt: skip
    tensors += [("model.norm.weight", (dim,)), ("model.output.weight", (spec["vocab"], dim))]
    state = {k: random_tensor(k, shape, seed, i) for i, (k, shape) in enumerate(tensors)}
    torch.save({"model": state}, out / "model.pt")
    total = sum(v.numel() * 2 for v in state.values())
    del state
    if "latent_shape" in spec:
        (out / "cosmos.json").write_text(json.dumps({"latent_shape": spec["latent_shape"], "context_frames": 1}))
    print(f"cosmos: {total / 2**30:.2f} GiB of bf16 tensors in {out}", file=sys.stderr)


def emu3(spec: dict, out: Path, seed: int, shard_gb: float) -> None:
    """Emu3-Gen's layout: ``config.json`` with its vocabulary map, shards of ``text_model.model.*``,
    ``text_model.lm_head.weight`` and ``vqmodel.*`` (as the release and transformers' save_pretrained write)."""
    from transformers import Emu3Config, Emu3ForConditionalGeneration

    from jacobigen.models.families.emu3 import NAMES

    names = dict(pad="<|endoftext|>", bos="<|extra_203|>", eos="<|extra_204|>", eoi="<|image end|>",
                 **{k: v for k, v in NAMES.items()})  # fmt: skip
    ids = spec["ids"]
    vocab = {"<unk>": 0} if 0 not in ids.values() else {}
    vocab.update({names[k]: i for k, i in ids.items()})
    vocab.update({w: 9 + i for i, w in enumerate([*WORDS, "*", ",", ".", *map(str, range(1, 129))])})
    text = dict(spec["text"], pad_token_id=ids["pad"], bos_token_id=ids["bos"], eos_token_id=ids["eos"])
    base = Emu3Config(text_config=text, vq_config=spec["vq"] or None)
    codes = base.vq_config.codebook_size
    first = base.text_config.vocab_size - codes  # the visual tokens close the vocabulary
    vocab.update({f"<|visual token {c:06d}|>": first + c for c in range(codes)})
    cfg = Emu3Config(text_config=text, vq_config=spec["vq"] or None, vocabulary_map=vocab)
    with torch.device("meta"):
        hf = Emu3ForConditionalGeneration(cfg)
    released = (
        ("model.text_model.", "text_model.model."),
        ("lm_head.", "text_model.lm_head."),
        ("model.vqmodel.", "vqmodel."),
    )
    tensors = []
    for k, v in hf.state_dict().items():
        ours, theirs = next(pair for pair in released if k.startswith(pair[0]))
        tensors.append((theirs + k.removeprefix(ours), tuple(v.shape)))
    total = write_shards(out, tensors, seed, shard_gb)
    cfg.save_pretrained(out)
    specials = [names[k] for k in ids if k not in ("pad", "bos", "eos")]
    tok = word_tokenizer(vocab, specials, bos_token=names["bos"], eos_token=names["eos"], pad_token=names["pad"])
    tok.save_pretrained(out)
    print(f"emu3: {total / 2**30:.2f} GiB of bf16 tensors in {out}", file=sys.stderr)


WRITERS = {
    "janus": janus,
    "lumina2": lumina2,
    "chameleon": chameleon,
    "llamagen": llamagen,
    "cosmos": cosmos,
    "emu3": emu3,
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=sorted(WRITERS))
    ap.add_argument("--shape")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard-gb", type=float, default=2.0, help="bytes per shard, in GiB (default 2)")
    ap.add_argument("--list", action="store_true", help="list the families' shapes and exit")
    a = ap.parse_args(argv)
    if a.list:
        for family, shapes in SHAPES.items():
            print(f"{family}: {', '.join(shapes)}")
        return
    if not (a.family and a.shape and a.out):
        ap.error("give --family, --shape and --out")
    if a.shape not in SHAPES[a.family]:
        ap.error(f"{a.family} has shapes {', '.join(SHAPES[a.family])}, not {a.shape!r}")
    a.out.mkdir(parents=True, exist_ok=True)
    WRITERS[a.family](SHAPES[a.family][a.shape], a.out, a.seed, a.shard_gb)


if __name__ == "__main__":
    main()
