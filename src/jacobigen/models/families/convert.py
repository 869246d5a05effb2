"""Transformers' Llama-shaped decoder stacks, converted once at load into our :class:`Transformer`.

Why: transformers' modules run these families correctly but slowly on an accelerator (a Python cache
object and unfused projections per forward, docs/DESIGN.md §7), and they were not written for
``torch.compile(fullgraph=True)`` and CUDA graphs. Chameleon (Lumina-mGPT, Anole), Janus-Pro's
language model and Emu3's text model are all one Llama shape with a few switches, so each family
keeps transformers for its config, tokenizer and vision/VQ parts and generates on our decoder.

The name map (transformers key -> ours, under the family's stack prefix):

==========================================================  ==============================
``embed_tokens.weight``                                     ``embed.weight``
``layers.i.input_layernorm.weight``                         ``layers.i.attn_norm.weight``
``layers.i.self_attn.{q,k,v}_proj.weight`` (rows stacked)   ``layers.i.attn.qkv.weight``
``layers.i.self_attn.o_proj.weight``                        ``layers.i.attn.out.weight``
``layers.i.self_attn.{q,k}_norm.{weight,bias}``             ``layers.i.attn.{q,k}_norm.*``
``layers.i.post_attention_layernorm.weight``                ``layers.i.ffn_norm.weight``
``layers.i.mlp.{gate,up}_proj.weight`` (rows stacked)       ``layers.i.ffn.gate_up.weight``
``layers.i.mlp.down_proj.weight``                           ``layers.i.ffn.down.weight``
``norm.weight``                                             ``norm.weight``
``lm_head.weight`` (no prefix)                              ``head.weight``
==========================================================  ==============================
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from ...core.errors import ConfigError, WeightsError
from ..transformer import NameMap, Transformer, TransformerConfig, rename_state

# transformers class -> (prefix of its decoder stack in the state dict, attribute holding the stack's config)
STACKS = {
    "ChameleonForConditionalGeneration": ("model.", None),
    "JanusForConditionalGeneration": ("model.language_model.", "text_config"),
    "Emu3ForConditionalGeneration": ("model.text_model.", "text_config"),
}
HEAD = "lm_head.weight"


def stack_of(hf) -> tuple[str, object]:
    """(state-dict prefix, config) of the decoder stack inside a family's transformers model."""
    name = type(hf).__name__
    if name not in STACKS:
        raise ConfigError(f"no conversion to our decoder for {name}: use one of {', '.join(STACKS)}")
    prefix, attr = STACKS[name]
    return prefix, getattr(hf.config, attr) if attr else hf.config


def config_from_hf(hf) -> TransformerConfig:
    """Our config for the decoder stack of ``hf`` (see :func:`config_from_text`)."""
    return config_from_text(stack_of(hf)[1], type(hf).__name__)


def config_from_text(tc, name: str) -> TransformerConfig:
    """Our config for a transformers decoder-stack config ``tc`` of class ``name``; whatever our decoder
    does not compute (a bias, another activation, RoPE scaling) is refused by name rather than silently
    computed differently, and a shape that cannot be built (no heads, a negative width) is a ConfigError."""
    heads = tc.num_attention_heads
    sizes = {k: getattr(tc, k) for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")}
    bad_sizes = [f"{k}={v!r}" for k, v in {**sizes, "num_attention_heads": heads}.items() if not v or v < 0]
    if bad_sizes:
        raise ConfigError(f"{name} config with {', '.join(bad_sizes)}: every size must be a positive number")
    refused = {
        "hidden_act": tc.hidden_act != "silu",
        "attention_bias": bool(getattr(tc, "attention_bias", False)),
        "mlp_bias": bool(getattr(tc, "mlp_bias", False)),
        "head_dim": getattr(tc, "head_dim", None) not in (None, tc.hidden_size // heads),
    }
    bad = [name for name, is_bad in refused.items() if is_bad]
    if bad:
        values = ", ".join(f"{name}={getattr(tc, name)!r}" for name in bad)
        raise ConfigError(f"{name} with {values}: our decoder does not compute that")
    rope = getattr(tc, "rope_parameters", None) or {}
    kind = rope.get("rope_type", "default")
    if kind != "default":
        raise ConfigError(f"{name} uses RoPE scaling of type {kind!r}: our decoder has plain RoPE only")
    return TransformerConfig(
        vocab_size=tc.vocab_size,
        dim=tc.hidden_size,
        n_layers=tc.num_hidden_layers,
        n_heads=heads,
        ffn_dim=tc.intermediate_size,
        max_seq_len=tc.max_position_embeddings,
        rope_theta=float(rope.get("rope_theta", 10000.0)),
        norm_eps=tc.rms_norm_eps,
        n_kv_heads=getattr(tc, "num_key_value_heads", None) or heads,
        qk_norm="chameleon" if name.startswith("Chameleon") else None,
        swin_norm=bool(getattr(tc, "swin_norm", False)),
    )


def per_head(rows: torch.Tensor, heads: int, key: str) -> torch.Tensor:
    """A q/k-norm parameter with one row per head. Lumina-mGPT stores one row per model-parallel shard
    and repeats it over the shard's heads at run time (``expand_shard_norms`` in :mod:`.chameleon`
    does the same for transformers); taking that layout here too lets a raw Lumina state dict convert."""
    if rows.shape[0] == heads:
        return rows
    if heads % rows.shape[0]:
        raise WeightsError(f"{key} has {rows.shape[0]} rows, which do not repeat to {heads} heads")
    return rows.repeat_interleave(heads // rows.shape[0], 0)


def hf_names(cfg: TransformerConfig, prefix: str) -> NameMap:
    """The name map above, for a stack under ``prefix``."""
    attn, mlp = prefix + "layers.{i}.self_attn.", prefix + "layers.{i}.mlp."
    names: NameMap = {
        "embed.weight": prefix + "embed_tokens.weight",
        "layers.{i}.attn_norm.weight": prefix + "layers.{i}.input_layernorm.weight",
        "layers.{i}.attn.qkv.weight": tuple(f"{attn}{p}_proj.weight" for p in "qkv"),
        "layers.{i}.attn.out.weight": attn + "o_proj.weight",
        "layers.{i}.ffn_norm.weight": prefix + "layers.{i}.post_attention_layernorm.weight",
        "layers.{i}.ffn.gate_up.weight": (mlp + "gate_proj.weight", mlp + "up_proj.weight"),
        "layers.{i}.ffn.down.weight": mlp + "down_proj.weight",
        "norm.weight": prefix + "norm.weight",
        "head.weight": HEAD,
    }
    if cfg.qk_norm:
        for name in ("q_norm", "k_norm"):
            for p in ("weight", "bias"):
                names[f"layers.{{i}}.attn.{name}.{p}"] = f"{attn}{name}.{p}"
    return names


def convert_state(state: dict[str, torch.Tensor], cfg: TransformerConfig, prefix: str) -> dict[str, torch.Tensor]:
    """A transformers state dict (keys under ``prefix``, head at ``lm_head.weight``) as our keys.
    Unfused tensors are the given ones, not copies."""
    out, _ = rename_state(state, hf_names(cfg, prefix), cfg, "the checkpoint")
    if cfg.qk_norm:
        for i in range(cfg.n_layers):
            for name, heads in (("q_norm", cfg.n_heads), ("k_norm", cfg.kv_heads)):
                for p in ("weight", "bias"):
                    key = f"layers.{i}.attn.{name}.{p}"
                    out[key] = per_head(out[key], heads, f"{prefix}layers.{i}.self_attn.{name}.{p}")
    return out


def from_hf(hf, release: bool = False) -> Transformer:
    """Our decoder with ``hf``'s decoder-stack weights, on their device and in their dtype.

    ``release``: drop transformers' decoder layers afterwards, so that a 7B model is held once, not
    twice (``hf`` can then no longer run its own forward; loaders pass it, tests keep both)."""
    prefix, _ = stack_of(hf)
    cfg = config_from_hf(hf)
    state = hf.state_dict()
    tied = state[HEAD].data_ptr() == state[prefix + "embed_tokens.weight"].data_ptr()
    cfg = replace(cfg, tie_embeddings=tied)
    with torch.device("meta"):  # no random init of weights that are about to be replaced
        model = Transformer(cfg)
    model.load_state_dict(convert_state(state, cfg, prefix), assign=True)
    if release:
        hf.get_submodule(prefix.rstrip(".")).layers = nn.ModuleList()
    return model.eval()
