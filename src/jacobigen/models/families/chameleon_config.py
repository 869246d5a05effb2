"""A Chameleon-format ``config.json`` (Chameleon, Lumina-mGPT 1 and 2, Anole) as our decoder's config,
and the checkpoint's tensor names: one checked reader for the loaders and the memory plan."""

from __future__ import annotations

import json
from pathlib import Path

from ...core.errors import ConfigError, WeightsError
from ..transformer import NameMap, TransformerConfig
from .convert import hf_names

PREFIX = "model."  # the decoder stack's keys (transformers' Chameleon names), head at lm_head.weight


def read_json(file: Path) -> dict:
    """A checkpoint's ``config.json`` as a dict: a file that is not a JSON object in UTF-8 is a
    :class:`WeightsError` naming it, before any weight is read (the loaders and the memory plan)."""
    try:
        raw = json.loads(file.read_bytes().decode("utf-8"))
    except OSError as e:
        raise WeightsError(f"cannot read {file}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise WeightsError(f"{file} is not UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError, or nesting too deep
        raise WeightsError(f"{file} is not JSON ({e}): is it the checkpoint's config?") from None
    if not isinstance(raw, dict):
        raise WeightsError(f"{file} holds a JSON {type(raw).__name__}, not an object: is it the checkpoint's config?")
    return raw


def read_config(path: Path) -> TransformerConfig:
    """Our decoder's config from the folder's ``config.json``."""
    return config_from_json(read_json(path / "config.json"), str(path / "config.json"))


def _whole(raw: dict, key: str, what: str, default: int | None = None) -> int:
    """A size field of ``config.json``: a whole number >= 1 (a 0 or negative size would surface
    later as a division by zero, or plan negative memory)."""
    value = raw.get(key)
    value = default if value is None else value
    if value is None:
        raise WeightsError(f"{what} lacks {key}: is it a Lumina-mGPT 2.0 config?")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WeightsError(f"{what}: {key} must be a whole number >= 1, got {value!r}")
    return value


def _positive(raw: dict, key: str, what: str, default: float) -> float:
    value = raw.get(key)
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise WeightsError(f"{what}: {key} must be a finite number > 0, got {value!r}")
    return float(value)


def config_from_json(raw: dict, what: str = "config.json") -> TransformerConfig:
    """Our decoder's config from a Lumina-mGPT 2.0 (Chameleon) ``config.json`` (RoPE's base as
    transformers 4 writes it, ``rope_theta``, or as 5 does, in ``rope_parameters``); whatever our
    decoder does not compute is refused by name rather than computed differently, and so is a size
    that is not a whole number >= 1 or heads that do not divide the width."""
    rope = raw.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise WeightsError(f"{what}: rope_parameters must be an object, got {rope!r}")
    refused = {
        "hidden_act": raw.get("hidden_act", "silu") != "silu",
        "attention_bias": bool(raw.get("attention_bias", False)),
        "mlp_bias": bool(raw.get("mlp_bias", False)),
        "rope_scaling": raw.get("rope_scaling") is not None,
        "rope_parameters": rope.get("rope_type", "default") != "default",
    }
    bad = [k for k, is_bad in refused.items() if is_bad]
    if bad:
        raise ConfigError(f"{what}: {', '.join(f'{k}={raw[k]!r}' for k in bad)}: our decoder does not compute that")
    dim, heads = _whole(raw, "hidden_size", what), _whole(raw, "num_attention_heads", what)
    kv_heads = _whole(raw, "num_key_value_heads", what, heads)
    if dim % heads or heads % kv_heads:
        raise WeightsError(
            f"{what}: hidden_size {dim}, num_attention_heads {heads} and num_key_value_heads {kv_heads} do not "
            "divide (each head's width is hidden_size / heads, each key/value head serves heads / kv heads)"
        )
    return TransformerConfig(
        vocab_size=_whole(raw, "vocab_size", what),
        dim=dim,
        n_layers=_whole(raw, "num_hidden_layers", what),
        n_heads=heads,
        ffn_dim=_whole(raw, "intermediate_size", what),
        max_seq_len=_whole(raw, "max_position_embeddings", what, 4096),
        rope_theta=_positive(raw, "rope_theta", what, rope.get("rope_theta", 10000.0)),
        norm_eps=_positive(raw, "rms_norm_eps", what, 1e-5),
        n_kv_heads=kv_heads,
        qk_norm="chameleon",
        swin_norm=bool(raw.get("swin_norm", False)),
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
    )


def names(cfg: TransformerConfig) -> NameMap:
    """Our keys -> the checkpoint's: transformers' Chameleon names (see :mod:`.convert`)."""
    out = hf_names(cfg, PREFIX)
    if cfg.tie_embeddings:
        out["head.weight"] = PREFIX + "embed_tokens.weight"
    return out
