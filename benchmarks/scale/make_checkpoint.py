"""A seeded random checkpoint at a family's published shape, in its released on-disk format, so that
``--model FAMILY:DIR`` loads it: the load path and the plan are then measured at the size users run.

    python benchmarks/scale/make_checkpoint.py --family janus --shape janus-pro-1b --out /work/scale-ckpt/janus-pro-1b

Families and shapes (``--list``): ``janus`` (transformers' Janus format, as ``deepseek-community/
Janus-Pro-*``: ``config.json``, ``generation_config.json``, sharded safetensors under
``model.safetensors.index.json``, every tensor of the model, vision encoder included) and ``lumina2``
(``Alpha-VLLM/Lumina-mGPT-2.0``'s layout: transformers 4's Chameleon ``config.json``, shards of
transformers' Chameleon names with q/k norms per model-parallel shard, ``movqgan_270M.ckpt``). Each
has a ``tiny`` shape for the test suite. Tokenizers are word-level with the family's special tokens
at the ids its loader reads (the released BPE vocabularies are not ours to ship).

Weights are fan-in scaled normals in bf16 (norms 1), written one shard at a time: the writer holds at
most one shard (``--shard-gb``) and one tensor.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

SHAPES = {
    "janus": {
        # transformers' JanusConfig defaults are Janus-Pro-1B's vision and VQ parts (SigLIP-L 384 px,
        # the 16,384-code VQ); the language models are DeepSeek-LLM-1.5B / -7B
        "janus-pro-1b": dict(text=dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                                       num_attention_heads=16, num_key_value_heads=16)),
        "janus-pro-7b": dict(text=dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=30,
                                       num_attention_heads=32, num_key_value_heads=32)),
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
        "lumina2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                           num_key_value_heads=32, vocab_size=172032, movq="270M"),
        "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=171392, movq="tiny"),
        # the suite's load-peak test: embedding and head (88 MB each in bf16) dwarf the process' noise
        "peak-test": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=171392, movq="tiny"),
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


def janus(spec: dict, out: Path, seed: int, shard_gb: float) -> None:
    from transformers import GenerationConfig, JanusConfig, JanusForConditionalGeneration

    text = dict(model_type="llama", vocab_size=102400, max_position_embeddings=16384, pad_token_id=100015,
                bos_token_id=100000, eos_token_id=100001, rms_norm_eps=1e-6, tie_word_embeddings=False)  # fmt: skip
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
    tensors += [("model.norm.weight", (dim,)), ("lm_head.weight", (vocab_size, dim))]
    total = write_shards(out, tensors, seed, shard_gb)
    config = dict(architectures=["ChameleonForConditionalGeneration"], model_type="chameleon", hidden_act="silu",
                  max_position_embeddings=10240, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None,
                  model_parallel_size=1, swin_norm=False, tie_word_embeddings=False, attention_bias=False,
                  qk_layernorms=True, torch_dtype="bfloat16", **spec)  # fmt: skip
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


WRITERS = {"janus": janus, "lumina2": lumina2}


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
