"""Cosmos-1.0-Autoregressive (4B, 12B: video continuation) on our decoder
(:class:`~jacobigen.models.transformer.Transformer`): a config, a name map from Cosmos' checkpoint keys
to ours, and what is Cosmos' own (its 3-D RoPE tables).

Architecture facts from NVIDIA/Cosmos ``cosmos1/models/autoregressive`` (``networks/transformer.py``,
``modules/{attention,embedding,mlp,normalization}.py``, ``configs/base/model_config.py``): Llama
blocks (``layers.i.attention.{wq,wk,wv,wo}``, grouped-query attention with 8 K/V heads,
``attention.{q_norm,k_norm}`` RMSNorm over each head before RoPE, ``attention_norm``, ``ffn_norm``,
``feed_forward.{w1,w2,w3}`` SwiGLU), ``tok_embeddings``, ``norm``, ``output``; RMSNorm in float32 with
eps 1e-5; RoPE theta 500,000 in 3-D: of each head's dim/2 frequency pairs, the first ``d_t/2`` turn
with the latent frame, then ``d_h/2`` with the row and ``d_h/2`` with the column (``d_h = dim//6*2``,
``d_t = dim - 2 d_h``), rotate-half convention (TransformerEngine's; "v2", which applies no YaRN
magnitude scale); the 12B model rescales its frequencies with YaRN (original latent shape
[3, 40, 64], beta_fast 4, beta_slow 1, scale 2). The base models have no special tokens: the
sequence is the video's tokens in (t, h, w) raster order, position = index in that order, ids
0..63,999 (FSQ codes of the DV8x16x16 tokenizer, ``cosmos_tokenizer.py``).

Generation as ``inference/base.py`` runs it: 33 frames of 640 x 1024 -> latent [5, 40, 64]; the
first 9 frames (2 latent frames, 5,120 tokens) are the prompt and 3 latent frames (7,680 tokens)
are sampled with temperature 1 and top-p 0.8 (4B) or 0.9 (12B), no CFG, no top-k. A prompt here is
a ``.npy`` file of the condition tokens [2, 40, 64] (Cosmos' encoder makes them; we ship no
encoder). Not supported: the Video2World 5B/13B checkpoints (T5 text cross-attention and absolute
position embeddings). Our top-p keeps the same ids as Cosmos' except on exact ties at the threshold.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from ...core.cache import KVCache
from ...core.errors import ConfigError, WeightsError
from ...core.layout import VideoLayout
from ..bundle import ModelBundle, rows_encoder
from ..transformer import NameMap, Transformer, TransformerConfig, _names, unrename_state
from .base import default_dtype, read_checkpoint
from .cosmos_tokenizer import JitDecoder, find_decoder, preview

YARN_12B = dict(yarn=True, original_latent_shape=(3, 40, 64), yarn_beta_fast=4.0, yarn_beta_slow=1.0, yarn_scale=2.0)
HEADS = 32  # both base models (4B: 32 x 128, 12B: 32 x 128)


@dataclass(frozen=True)
class CosmosConfig:
    dim: int
    n_layers: int
    n_heads: int = HEADS
    n_kv_heads: int = 8
    head_dim: int | None = None
    ffn_dim: int = 14336
    vocab_size: int = 64000
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    qk_norm: bool = True
    latent_shape: tuple[int, int, int] = (5, 40, 64)  # latent frames, rows, cols of one sequence
    context_frames: int = 2  # latent frames given as the prompt (9 pixel frames)
    yarn: bool = False
    original_latent_shape: tuple[int, int, int] = (3, 40, 64)
    yarn_beta_fast: float = 4.0
    yarn_beta_slow: float = 1.0
    yarn_scale: float = 2.0
    sampling: dict = field(default_factory=lambda: {"temperature": 1.0, "top_p": 0.8, "top_k": None, "cfg": 1.0})

    @property
    def hd(self) -> int:
        return self.head_dim or self.dim // self.n_heads

    @property
    def max_seq_len(self) -> int:
        return math.prod(self.latent_shape)

    def decoder(self) -> TransformerConfig:
        """Our decoder's config (its ``rope_theta`` goes unused: Cosmos passes its own 3-D tables)."""
        return TransformerConfig(
            vocab_size=self.vocab_size,
            dim=self.dim,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
            head_size=self.head_dim,
            ffn_dim=self.ffn_dim,
            max_seq_len=self.max_seq_len,
            rope_theta=self.rope_theta,
            norm_eps=self.norm_eps,
            qk_norm="rms" if self.qk_norm else None,
        )


# Cosmos' checkpoint keys (``model.`` prefix dropped: :func:`clean_state`) -> ours
NAMES: NameMap = {
    "embed.weight": "tok_embeddings.weight",
    "layers.{i}.attn_norm.weight": "layers.{i}.attention_norm.weight",
    "layers.{i}.attn.qkv.weight": tuple(f"layers.{{i}}.attention.w{p}.weight" for p in "qkv"),
    "layers.{i}.attn.out.weight": "layers.{i}.attention.wo.weight",
    "layers.{i}.ffn_norm.weight": "layers.{i}.ffn_norm.weight",
    "layers.{i}.ffn.gate_up.weight": ("layers.{i}.feed_forward.w1.weight", "layers.{i}.feed_forward.w3.weight"),
    "layers.{i}.ffn.down.weight": "layers.{i}.feed_forward.w2.weight",
    "norm.weight": "norm.weight",
    "head.weight": "output.weight",
}
QK_NAMES: NameMap = {
    "layers.{i}.attn.q_norm.weight": "layers.{i}.attention.q_norm.weight",
    "layers.{i}.attn.k_norm.weight": "layers.{i}.attention.k_norm.weight",
}
BACKBONE = "backbone."


def names(c: CosmosConfig) -> NameMap:
    return {**NAMES, **QK_NAMES} if c.qk_norm else NAMES


def stream_checkpoint(
    state: dict[str, torch.Tensor],
    c: CosmosConfig,
    path: Path,
    dtype: torch.dtype,
    device: str | torch.device,
    quantize: str | None = None,
) -> Cosmos:
    """:class:`Cosmos` filled from its (cleaned, memory-mapped) state dict tensor by tensor
    (:mod:`.stream`), each linear quantized to ``quantize`` as it is filled; a key the map does not
    name is a WeightsError."""
    from .stream import Tensors, fill

    with torch.device("meta"):  # no random init of weights that are about to be replaced
        model = Cosmos(c)
    source = Tensors(state, path)
    fill(model, [(BACKBONE + key, theirs) for _, key, theirs in _names(names(c), c.n_layers)], source, dtype, device,
         quantize)  # fmt: skip
    if source.unused():
        raise WeightsError(f"{path}: keys do not match Cosmos' (unexpected {source.unused()[:3]})")
    return model.eval()


def to_checkpoint(model: Cosmos) -> dict[str, torch.Tensor]:
    """:class:`Cosmos`' weights under Cosmos' names, as its ``model.pt`` holds them (no prefix)."""
    ours = {k.removeprefix(BACKBONE): v for k, v in model.state_dict().items()}
    return unrename_state(ours, names(model.config), model.config.decoder())


def yarn_factors(inv_freq: torch.Tensor, original: int, c: CosmosConfig) -> torch.Tensor:
    """YaRN: frequencies below ``beta_slow`` turns over the original length are divided by the
    scale, those above ``beta_fast`` kept, linear in between."""
    high = 2 * math.pi * c.yarn_beta_fast / original
    low = 2 * math.pi * c.yarn_beta_slow / original
    smooth = ((inv_freq - low) / (high - low)).clamp(0, 1)
    return (1 - smooth) / c.yarn_scale + smooth


def inverse_frequencies(c: CosmosConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(temporal [d_t/2], spatial [d_h/2]) rotary frequencies of one head."""
    d_h = c.hd // 6 * 2
    d_t = c.hd - 2 * d_h
    # on the CPU even where the model is built on the meta device (at load)
    spatial = 1.0 / c.rope_theta ** (torch.arange(0, d_h, 2, device="cpu")[: d_h // 2].float() / d_h)
    temporal = 1.0 / c.rope_theta ** (torch.arange(0, d_t, 2, device="cpu")[: d_t // 2].float() / d_t)
    if c.yarn:
        spatial = spatial * yarn_factors(spatial, c.original_latent_shape[1], c)
        temporal = temporal * yarn_factors(temporal, c.original_latent_shape[0], c)
    return temporal, spatial


def rope_3d(positions: torch.Tensor, c: CosmosConfig, temporal, spatial, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [R, 1, T, head_dim/2] of sequence positions [R, T]: each position's (frame, row,
    column) in the latent raster turns the temporal, row and column frequencies."""
    _, h, w = c.latent_shape
    p = positions[:, None, :, None]
    t_, r_, w_ = (p // (h * w)).float(), (p // w % h).float(), (p % w).float()
    angles = torch.cat([t_ * temporal.to(p.device), r_ * spatial.to(p.device), w_ * spatial.to(p.device)], -1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


class Cosmos(nn.Module):
    """The base Cosmos-1.0-Autoregressive transformer behind the decoders' model interface: our decoder
    (``backbone``) with Cosmos' 3-D RoPE tables. Checkpoints load through :func:`stream_checkpoint`."""

    def __init__(self, c: CosmosConfig):
        super().__init__()
        if c.hd % 2 or (c.head_dim is None and c.dim % c.n_heads) or c.n_heads % c.n_kv_heads:
            raise ConfigError(f"Cosmos config: dim {c.dim}, {c.n_heads} heads, {c.n_kv_heads} K/V heads do not fit")
        self.config = c
        self.backbone = Transformer(c.decoder())
        self._freqs = inverse_frequencies(c)

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def max_seq_len(self) -> int:
        return self.config.max_seq_len

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        return self.backbone.new_cache(rows, capacity)

    def forward(self, tokens, positions=None, mask=None, cache=None):
        if positions is None:
            positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        b = self.backbone
        x = b.embed(tokens)
        rope = rope_3d(positions, self.config, *self._freqs, x.dtype)
        return b.head(b.hidden(x, mask=mask, cache=cache, rope=rope)).float()


# --- checkpoints --------------------------------------------------------------------------------


def clean_state(raw: dict) -> dict:
    """Cosmos' ``process_state_dict``: the ``model`` entry when there is one, the ``model.`` prefix
    dropped, TransformerEngine's ``_extra_state`` entries skipped."""
    state = raw.get("model", raw) if isinstance(raw, dict) else raw
    return {k.removeprefix("model."): v for k, v in state.items() if "_extra_state" not in k}


def config_from_state(state: dict, **over) -> CosmosConfig:
    """Sizes from tensor shapes: width and vocabulary from the embedding, depth from the layer
    keys, head size from the q/k norm (or ``dim / 32``), K/V heads from ``wk``; the 12B shape
    (40 layers of 5120) takes its YaRN rescaling. ``over`` (a ``cosmos.json``) has the last word."""
    if any("cross_attention" in k for k in state):
        raise ConfigError(
            "this is a Cosmos Video2World checkpoint (text cross-attention): only the base "
            "Cosmos-1.0-Autoregressive-4B/12B checkpoints are supported"
        )
    try:
        vocab, dim = state["tok_embeddings.weight"].shape
        layers = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers."))
        qk = "layers.0.attention.q_norm.weight" in state
        head_dim = state["layers.0.attention.q_norm.weight"].shape[0] if qk else dim // HEADS
        heads = state["layers.0.attention.wq.weight"].shape[0] // head_dim
        kv = state["layers.0.attention.wk.weight"].shape[0] // head_dim
        ffn = state["layers.0.feed_forward.w1.weight"].shape[0]
    except (KeyError, ValueError) as e:
        raise WeightsError(f"not a Cosmos autoregressive checkpoint (missing {e})") from None
    sizes = dict(
        dim=dim,
        n_layers=layers,
        n_heads=heads,
        n_kv_heads=kv,
        ffn_dim=ffn,
        vocab_size=vocab,
        qk_norm=qk,
        head_dim=head_dim if head_dim * heads != dim else None,
    )
    if (layers, dim) == (40, 5120):
        sizes.update(YARN_12B, sampling={"temperature": 1.0, "top_p": 0.9, "top_k": None, "cfg": 1.0})
    known = {f.name for f in fields(CosmosConfig)}
    unknown = set(over) - known
    if unknown:
        raise ConfigError(f"cosmos.json: unknown field(s) {', '.join(sorted(unknown))}")
    sizes.update({k: tuple(v) if isinstance(v, list) else v for k, v in over.items()})
    return CosmosConfig(**sizes)


def load_cosmos(
    path: Path, device: str = "cpu", dtype: torch.dtype | None = None, quantize: str | None = None
) -> Cosmos:
    """``model.pt`` (or a folder holding it) with an optional ``cosmos.json`` of config overrides,
    streamed from the memory-mapped file at ``dtype`` (default :func:`.base.default_dtype`)."""
    file, state, cfg = read_config(path)
    return stream_checkpoint(state, cfg, file, dtype or default_dtype(device), device, quantize)


def read_config(path: Path) -> tuple[Path, dict, CosmosConfig]:
    """(file, memory-mapped state, config) of ``model.pt`` or its folder, with ``cosmos.json``'s
    overrides; no tensor is read (the loader and the memory plan)."""
    file = path / "model.pt" if path.is_dir() else path
    if not file.is_file():
        raise WeightsError(f"Cosmos weights not found: {file} (pass the model.pt or its folder)")
    state = clean_state(read_checkpoint(file, "Cosmos"))
    extra = file.parent / "cosmos.json"
    try:
        over = json.loads(extra.read_text()) if extra.is_file() else {}
    except json.JSONDecodeError as e:
        raise ConfigError(f"{extra} is not valid JSON: {e}") from None
    return file, state, config_from_state(state, **over)


def save_config(model: Cosmos, directory: Path) -> None:
    """Write ``cosmos.json`` with the fields the weights' shapes cannot tell (latent shape, context)."""
    c = model.config
    keep = {"latent_shape": list(c.latent_shape), "context_frames": c.context_frames}
    (Path(directory) / "cosmos.json").write_text(json.dumps(keep))


# --- the pipeline ---------------------------------------------------------------------------------


def frames_to_images(frames: torch.Tensor) -> list[list[Image.Image]]:
    """uint8 frames [B, T, H, W, 3] -> one list of RGB images per clip."""
    return [[Image.fromarray(f.numpy()) for f in clip] for clip in frames.cpu()]


def cosmos_pipeline(model: Cosmos, decoder_path: Path | None = None, device: str = "cpu") -> ModelBundle:
    c = model.config
    t, h, w = c.latent_shape
    if not 1 <= c.context_frames < t:
        raise ConfigError(f"Cosmos: context_frames {c.context_frames} must lie in [1, {t - 1}]")
    layout = VideoLayout(h, w, (0, c.vocab_size), frames=t - c.context_frames)

    def encode(text: str) -> list[int]:
        path = Path(text).expanduser()
        if path.suffix != ".npy" or not path.is_file():
            raise ConfigError(
                f"a Cosmos prompt is a .npy file of condition tokens [{c.context_frames}, {h}, {w}] "
                f"(Cosmos' DV8x16x16 encoder makes them), got {text!r}"
            )
        tokens = np.load(path)
        if tokens.shape != (c.context_frames, h, w) or tokens.min() < 0 or tokens.max() >= c.vocab_size:
            raise ConfigError(
                f"{path}: condition tokens must be ids in [0, {c.vocab_size}) of shape "
                f"{(c.context_frames, h, w)}, got shape {tokens.shape}"
            )
        return tokens.reshape(-1).tolist()

    if decoder_path is not None:
        frames_of, note = JitDecoder(decoder_path, t, device), ""
    else:
        frames_of = preview
        note = "no decoder.jit found: clips show the FSQ codes of each latent frame as colours, not pixels"

    def decode(clips: torch.Tensor, prompts=None) -> list[list[Image.Image]]:
        """Clips with their condition frames first, as Cosmos' decoder reads whole chunks and Cosmos
        writes the whole clip; without prompts, the sampled frames' preview."""
        if prompts is None:
            return frames_to_images(preview(clips))
        cond = torch.tensor(prompts.cond, device=clips.device).view(len(prompts.cond), c.context_frames, h, w)
        return frames_to_images(frames_of(torch.cat([cond, clips], 1)))

    return ModelBundle(
        "cosmos", model, layout, rows_encoder(encode, None), decode, dict(c.sampling), note=note, example_prompts=[]
    )


def load(
    path: str | Path, device: str = "cpu", dtype: torch.dtype | None = None, quantize: str | None = None
) -> ModelBundle:
    """``--model cosmos:DIR`` (``DIR/model.pt``, its ``decoder.jit`` found beside it or in the
    tokenizer's release folder next to it); ``dtype``, ``quantize``: see :func:`load_cosmos`."""
    p = Path(path).expanduser()
    model = load_cosmos(p, device, dtype, quantize)
    return cosmos_pipeline(model, find_decoder(p if p.is_dir() else p.parent), device)
