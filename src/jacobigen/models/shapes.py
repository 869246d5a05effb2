"""The shape a memory plan counts, from the configs the loaders read: a checkpoint folder's own
``config.json`` (``--model``), or a published release's configuration (``jacobigen plan --shape``,
:mod:`.releases`), each through the loaders' own config readers, so that the plan and the loaded
model cannot disagree."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import torch

from ..core.errors import ConfigError, WeightsError
from .memory import Shape, from_config
from .releases import RELEASES, Release


def shape_of(spec: str) -> Shape | None:
    """The shape of a ``--model`` spec without loading its weights: the shipped and random models
    from their configs, Chameleon / Lumina-mGPT / Anole / Janus / Emu3 checkpoints from their
    ``config.json``, LlamaGen and Cosmos files from the config their loaders infer from the tensors'
    shapes (memory-mapped: no tensor is read); None where only loading tells (a LlamaGen file whose
    pickled arguments need ``--trust-checkpoint``, or a LlamaGen ``.safetensors``, which loads whole)."""
    from . import embedded as E
    from .load import EMBEDDED, VIDEO_MODELS

    if spec in (*EMBEDDED, *VIDEO_MODELS) or spec.partition(":")[0] in ("emoji", "emoji-video"):
        family, _, path = spec.partition(":")
        video = family in VIDEO_MODELS
        folder, sampling = VIDEO_MODELS.get(spec, (None, E.VIDEO_SAMPLING)) if video else (EMBEDDED.get(spec), None)
        folder = Path(path) if path else folder
        cfg = _safetensors_config(folder / "ar.safetensors")
        if cfg is None:
            return None
        tokens = cfg.max_seq_len if video else E.IMAGE_TOKENS  # a clip fills the model's positions
        sampling = sampling or E.sampling_for(folder)
        return from_config(cfg, spec, tokens, prompt_tokens=16, cfg=sampling["cfg"] != 1)  # its own guidance
    if spec in ("random", "random-video"):
        return None  # a few MB: nothing to plan
    from .families import FAMILIES

    family, _, path = spec.partition(":")
    name = FAMILIES.get(family.lower())
    if name is None or not path:
        return None
    path, _, query = path.partition("?")
    from .families.base import require_dir

    size = int(dict(p.partition("=")[::2] for p in query.split("&") if p).get("size") or 0)
    if name in ("llamagen", "cosmos"):  # a checkpoint file or its folder: planned from its tensors' shapes
        if not Path(path).expanduser().exists():
            raise WeightsError(f"{family} weights not found: {Path(path).expanduser()} does not exist")
        return pt_shape(spec, name, Path(path).expanduser(), size)
    folder = require_dir(path, family)  # a missing folder is said here, before any plan
    return family_shape(spec, name, folder, size)


def lined_tokens(g: int) -> int:
    """Tokens of a g x g grid whose rows each end in an end-of-line token, then an end-of-image."""
    return g * (g + 1) + 1


def lumina_tokens(side: int) -> int:
    """Lumina-mGPT's image tokens at ``side`` pixels: a code per 16 px."""
    return lined_tokens(side // 16)


# bytes one image's pixel decode holds per output pixel at float32, measured on a CPU (AMD EPYC) by
# benchmarks/scale/image_decode.py (its JSON beside it): peak resident memory over the process' before
PIXEL_BYTES = {"lumina2": 8293, "chameleon": 1697, "anole": 1697, "janus": 2719, "llamagen": 1719, "emu3": 41596}


def image_side(name: str, raw: dict, size: int) -> int:
    """The image's side in pixels at ``size`` (0: the family's default)."""
    if name == "anole":
        return 512
    if name == "janus":
        return int(raw.get("vision_config", {}).get("image_size", 384))
    return size or {"emu3": 720}.get(name, 768)


def image_tokens(name: str, raw: dict, side: int) -> int:
    """The layout's tokens of an image of ``side`` pixels."""
    if name == "chameleon":
        return lumina_tokens(side)
    if name in ("lumina2", "emu3"):  # 8 px per code
        return lined_tokens(side // 8)
    return 1025 if name == "anole" else int(raw.get("vision_config", {}).get("num_image_tokens", 576))


def config_shape(
    spec: str, name: str, raw: dict, side: int, decoder: int | None = None, janus=None, what: str = "config.json"
) -> Shape:
    """The shape of the model the family's loader builds from ``raw`` (a ``config.json``): its decoder
    config through the loaders' own parser (a config our decoder cannot build is a ConfigError); for
    Janus, ``janus`` (its JanusConfig, and whether the head is the embedding) adds the image parts as
    the meta-device model its streaming load fills. ``decoder``: the image decoder's bytes, loaded at
    float32 whatever the model's dtype (0: none, the images are token palettes; None: it is inside the
    checkpoint and the model's); its decode of one ``side``-pixel image is planned at ``PIXEL_BYTES``."""
    from .families.chameleon_config import config_from_json
    from .transformer import check_config

    cfg = config_from_json(raw.get("text_config", raw) if name in ("janus", "emu3") else raw, what)
    cfg = replace(cfg, qk_norm=None if name in ("janus", "emu3") else cfg.qk_norm)
    check_config(cfg)
    tokens, pixels = image_tokens(name, raw, side), 0 if decoder == 0 else PIXEL_BYTES[name] * side * side
    if name != "janus":
        return from_config(cfg, spec, tokens, decoder=decoder or 0, image_decode=pixels, streamed=True)
    from .families.janus import meta_image_parts

    config, tied = janus
    cfg = replace(cfg, tie_embeddings=cfg.tie_embeddings or tied)
    parts = meta_image_parts(config).model
    linears = [m for m in parts.modules() if isinstance(m, torch.nn.Linear)]
    codes = parts.vqmodel.config.num_embeddings
    return replace(
        from_config(cfg, spec, tokens),
        logits=cfg.vocab_size + codes,
        head=cfg.vocab_size,
        extra_linear=tuple((m.out_features, m.in_features) for m in linears),
        extra_params=sum(p.numel() for p in parts.parameters()) - sum(m.weight.numel() for m in linears),
        image_decode=pixels,
        streamed=True,
    )


def family_shape(spec: str, name: str, folder: Path, size: int) -> Shape:
    """The shape of the model the family's loader builds from ``folder``: :func:`config_shape` of its
    ``config.json``, with the image decoder as stored (Lumina-mGPT 2.0's MoVQGAN, Chameleon's VQGAN)."""
    from .families.chameleon_config import read_json

    config = folder / "config.json"
    if not config.is_file():
        raise WeightsError(f"{folder} has no config.json: is it a {name} checkpoint folder?")
    raw = read_json(config)
    if name == "chameleon" and not size:
        from .families.chameleon import size_from_name

        size = size_from_name(folder) or 0
    side = image_side(name, raw, size)
    if name == "janus":
        from .families.janus import read_config
        from .families.stream import Checkpoint

        janus = (read_config(folder), "lm_head.weight" not in Checkpoint(folder))
        return config_shape(spec, name, raw, side, janus=janus, what=str(config))
    from .families.vq import chameleon_vqgan_bytes

    decoder = {"lumina2": movq_bytes, "chameleon": chameleon_vqgan_bytes, "anole": chameleon_vqgan_bytes}
    weighed = decoder[name](folder) if name in decoder else None
    return config_shape(spec, name, raw, side, weighed, what=str(config))


def movq_bytes(folder: Path) -> int:
    """Bytes of the MoVQGAN decoder the Lumina-mGPT 2.0 loader keeps (float32), read from the mapped file."""
    from .families.base import mapped_bytes
    from .families.lumina2 import find_movqgan
    from .movqgan import DECODER_KEYS

    ckpt = find_movqgan(folder)
    return 0 if ckpt is None else mapped_bytes(ckpt, lambda k: k.startswith(DECODER_KEYS))


def llamagen_shape(spec: str, c, decoder: bool) -> Shape:
    """A LlamaGen GPT (:class:`LlamaGenConfig`): class ids follow the codes in our id space (1000
    classes + the null label), the head covers the codes; ``decoder``: its VQ-16 decodes the pixels."""
    stack = from_config(c.decoder(), spec, c.block_size, streamed=True)
    pixels = PIXEL_BYTES["llamagen"] * (16 * c.grid) ** 2 if decoder else 0
    ids = c.vocab_size + c.cond_ids
    return replace(stack, vocab=ids, logits=ids, head=c.vocab_size, prompt_tokens=c.cls_token_num, image_decode=pixels)


def cosmos_shape(spec: str, c) -> Shape:
    """A Cosmos model (:class:`CosmosConfig`): its given latent frames are the prompt, no CFG (one row
    per clip), and clips preview their codes (no pixel decoder)."""
    frame = c.latent_shape[1] * c.latent_shape[2]
    given = c.context_frames * frame
    stack = from_config(c.decoder(), spec, c.max_seq_len - given, prompt_tokens=given, streamed=True)
    return replace(stack, cfg=False)


def pt_shape(spec: str, name: str, path: Path, size: int) -> Shape | None:
    """LlamaGen's or Cosmos' checkpoint file (or its folder) through the loader's own config reader."""
    if name == "cosmos":
        from .families.cosmos import read_config as cosmos_config

        return cosmos_shape(spec, cosmos_config(path)[2])
    from .families.base import UntrustedCheckpoint
    from .families.llamagen import DOWNSAMPLE, gpt_checkpoint
    from .families.llamagen import read_config as llamagen_config

    ckpt = gpt_checkpoint(path)
    if ckpt.suffix == ".safetensors":
        return None
    try:
        _, c = llamagen_config(ckpt, **({"block_size": (size // DOWNSAMPLE) ** 2} if size else {}))
    except UntrustedCheckpoint:  # its pickled arguments: read only once the user trusts them
        return None
    return llamagen_shape(spec, c, (ckpt.parent / f"vq_ds{DOWNSAMPLE}_{c.model_type}.pt").is_file())


def release_shape(name: str, r: Release) -> Shape:
    """The shape of a published release, from its configuration through the same readers."""
    note = dict(note=r.note)
    if r.family == "llamagen":
        from .families.llamagen_model import LlamaGenConfig

        return replace(llamagen_shape(name, LlamaGenConfig(**r.config), True), **note)
    if r.family == "cosmos":
        from .families.cosmos import CosmosConfig

        return replace(cosmos_shape(name, CosmosConfig(**r.config)), **note)
    if r.family in ("janus", "emu3"):
        from ..core.quantize import quiet_torchao

        with quiet_torchao():  # transformers imports torchao (when installed) as it builds a model
            try:
                from transformers import Emu3Config, JanusConfig
            except ImportError:
                raise ConfigError(f'the {name} shape is read by transformers: pip install -e ".[families]"') from None
            config = (JanusConfig if r.family == "janus" else Emu3Config)(**r.config)
            raw = config.to_dict()
            janus = (config, bool(config.text_config.tie_word_embeddings)) if r.family == "janus" else None
            shape = config_shape(name, r.family, raw, image_side(r.family, raw, r.size), janus=janus)
        return replace(shape, **note)
    decoder = None  # a VQGAN the plan does not weigh without its file
    if r.family == "lumina2":  # MoVQGAN-270M's decoder, as loaded (float32)
        from .movqgan import MoVQDecoder

        with torch.device("meta"):
            decoder = sum(p.numel() * 4 for p in MoVQDecoder().parameters())
    return replace(config_shape(name, r.family, r.config, image_side(r.family, r.config, r.size), decoder), **note)


@cache
def named(name: str) -> Shape:
    """A named release's shape (``jacobigen plan --shape NAME``; ``--list`` names them)."""
    if name not in RELEASES:
        raise ConfigError(f"unknown shape {name!r}: use one of {', '.join(RELEASES)}")
    return release_shape(name, RELEASES[name])


def _safetensors_config(path: Path):
    """Our decoder's config from a safetensors file's metadata (no tensor is read)."""
    from safetensors import safe_open

    from .transformer import TransformerConfig

    try:
        with safe_open(str(path), framework="pt") as f:
            return TransformerConfig(**json.loads(f.metadata()["config"]))
    except Exception:
        return None
