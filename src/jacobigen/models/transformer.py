"""Our Llama-style decoder (RoPE, RMSNorm, SwiGLU, SDPA) behind the decoders' model interface: the one
block stack every model runs on (the embedded model, and every family through a config and a name map).

The interface every model family implements (docs/DESIGN.md §5, written down with its cache rule
as :class:`jacobigen.core.contract.ImageModel`) is one call::

    logits = model(tokens [R, T], positions [R, T], mask [R, 1, T, C], cache)

where ``mask`` is an additive float mask over all ``C`` cache slots and ``cache`` is a
:class:`~jacobigen.core.cache.KVCache` made by ``model.new_cache(rows, capacity)``. Without a cache the
call is plain causal attention, which is what training uses.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..core import invariant
from ..core.cache import KVCache
from ..core.errors import ConfigError, WeightsError


@dataclass(frozen=True)
class TransformerConfig:
    """The embedded model's shape, plus the options the Llama-shaped families need (their defaults are
    the embedded model, so configs saved before these fields existed still load):

    ``n_kv_heads``: key/value heads (grouped-query attention; None: one per query head).
    ``qk_norm``: None, or ``"chameleon"``: a layer norm over each head's vector without affine, then a
    weight and bias per head [heads, head_dim], on q and k before RoPE (Chameleon, Lumina-mGPT, Anole).
    ``qk_norm="rms"``: an RMSNorm (eps ``norm_eps``) over each head's vector with one weight [head_dim]
    shared by all heads, on q and k before RoPE (Cosmos).
    ``swin_norm``: Chameleon's post-norm blocks (the norm follows attention and MLP inside the residual).
    ``tie_embeddings``: the output head is the input embedding.
    ``head_size``: each head's width when it is not ``dim / n_heads`` (Cosmos-12B: 32 heads of 128 in a
    model of width 5,120).
    """

    vocab_size: int
    dim: int = 256
    n_layers: int = 6
    n_heads: int = 8
    ffn_dim: int | None = None
    max_seq_len: int = 512
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    n_kv_heads: int | None = None
    qk_norm: str | None = None
    swin_norm: bool = False
    tie_embeddings: bool = False
    head_size: int | None = None

    @property
    def head_dim(self) -> int:
        return self.head_size or self.dim // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def hidden_dim(self) -> int:
        # SwiGLU with the Llama sizing rule, rounded up to a multiple of 32.
        return self.ffn_dim or -(-int(8 * self.dim / 3) // 32) * 32


QK_NORMS = (None, "chameleon", "rms")


def check_config(cfg: TransformerConfig) -> None:
    sizes = {"vocab_size": cfg.vocab_size, "dim": cfg.dim, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads}
    sizes.update(kv_heads=cfg.kv_heads, hidden_dim=cfg.hidden_dim, head_dim=cfg.head_size or 1)
    bad = [f"{k}={v!r}" for k, v in sizes.items() if not isinstance(v, int) or v <= 0]
    if bad:
        raise ConfigError(f"a model with {', '.join(bad)}: every size must be a positive whole number")
    if (cfg.head_size is None and cfg.dim % cfg.n_heads) or cfg.head_dim % 2:
        raise ConfigError(f"dim {cfg.dim} must split into {cfg.n_heads} heads of even size")
    if cfg.n_heads % cfg.kv_heads:
        raise ConfigError(f"{cfg.n_heads} query heads do not share {cfg.kv_heads} key/value heads evenly")
    if cfg.qk_norm not in QK_NORMS:
        raise ConfigError(f"unknown qk_norm {cfg.qk_norm!r}: use one of {QK_NORMS}")


def rope_angles(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin tables [R, 1, T, head_dim/2] for integer positions [R, T], shared by all layers. (A family
    whose rotary is not 1-D, Cosmos' 3-D or LlamaGen's 2-D, hands :meth:`Transformer.hidden` its own
    tables of this shape.)"""
    half = head_dim // 2
    inv_freq = theta ** (-torch.arange(half, device=positions.device, dtype=torch.float32) / half)
    angles = positions[:, None, :, None].to(torch.float32) * inv_freq
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply rotary embeddings to x [R, H, T, D] (rotate-half convention)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def qk_norms(cfg: TransformerConfig) -> tuple[nn.Module | None, nn.Module | None]:
    """(q norm, k norm) of one attention layer, as ``cfg.qk_norm`` says."""
    if cfg.qk_norm == "chameleon":
        return HeadNorm(cfg.n_heads, cfg.head_dim), HeadNorm(cfg.kv_heads, cfg.head_dim)
    if cfg.qk_norm == "rms":
        return nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps), nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps)
    return None, None


class HeadNorm(nn.Module):
    """Chameleon's q/k norm: statistics over each head's vector, then each head's own weight and bias.
    Chameleon trained with model-parallel shards that each normalised their heads alone; transformers
    (and we) keep one row per head. Its epsilon is fixed at 1e-5, whatever the model's RMSNorm uses."""

    def __init__(self, heads: int, head_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(heads, head_dim))
        self.bias = nn.Parameter(torch.zeros(heads, head_dim))

    def forward(self, x):  # x [R, H, T, D]
        x = F.layer_norm(x, x.shape[-1:], eps=1e-5)
        return x * self.weight[:, None] + self.bias[:, None]


def attend(q, k, v, mask, causal: bool):
    """SDPA with grouped-query heads. With a mask, each key/value head attends for its group of query
    heads stacked along the token axis (the mask repeated to match), so the cache is never copied per
    query head; a mask-free forward has no cache, and repeating its block's keys is cheap. Inside
    :func:`jacobigen.core.invariant.row_invariant_kernels` a query's output does not depend on its
    block nor on the cache's capacity."""
    r, h, t, d = q.shape
    group = h // k.shape[1]
    if mask is None:
        if group > 1:
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    # deterministic decoding: one call shape whatever the block and the cache (core.invariant)
    sdpa = invariant.attention if invariant.active() else F.scaled_dot_product_attention
    if group == 1:
        return sdpa(q, k, v, attn_mask=mask)
    mask = mask[:, :, None].expand(-1, -1, group, -1, -1).reshape(mask.shape[0], 1, group * t, mask.shape[-1])
    y = sdpa(q.reshape(r, k.shape[1], group * t, d), k, v, attn_mask=mask)
    return y.view(r, h, t, d)


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.heads, self.kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.dim, (cfg.n_heads + 2 * cfg.kv_heads) * cfg.head_dim, bias=False)
        self.out = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        self.q_norm, self.k_norm = qk_norms(cfg)

    def forward(self, x, rope, mask, cache):
        r, t, _ = x.shape
        qkv = self.qkv(x).view(r, t, -1, self.head_dim).transpose(1, 2)
        q, k, v = qkv.split((self.heads, self.kv_heads, self.kv_heads), dim=1)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rotate(q, *rope), rotate(k, *rope)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)
        y = attend(q, k, v, mask, causal=mask is None and cache is None)
        return self.out(y.transpose(1, 2).reshape(r, t, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.gate_up = nn.Linear(cfg.dim, 2 * cfg.hidden_dim, bias=False)
        self.down = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig, layer: int):
        super().__init__()
        self.swin = cfg.swin_norm
        self.attn_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.attn = Attention(cfg, layer)
        self.ffn_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x, rope, mask, cache):
        if self.swin:
            x = x + self.attn_norm(self.attn(x, rope, mask, cache))
            return x + self.ffn_norm(self.ffn(x))
        x = x + self.attn(self.attn_norm(x), rope, mask, cache)
        return x + self.ffn(self.ffn_norm(x))


class Transformer(nn.Module):
    """The decoder every model runs on: the embedded model; converted from their transformers
    checkpoints (:mod:`jacobigen.models.families.convert`), Chameleon / Lumina-mGPT / Anole, Janus-Pro's
    language model and Emu3; and, from their own checkpoints through a name map
    (:func:`rename_state`), LlamaGen and Cosmos.

    It is written to compile into one graph (``torch.compile(fullgraph=True)``) and replay as a CUDA
    graph: static cache buffers, fused projections, configuration read only at construction, and no
    Python objects built per forward. Families whose image tokens are not the plain embedding and
    head (Janus, LlamaGen) call :meth:`hidden` on their own input embeddings and apply their own head;
    families whose rotary is not 1-D (LlamaGen, Cosmos) pass it their own cos/sin tables.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        check_config(cfg)
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.apply(self._init)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    @torch.no_grad()
    def randomize_(self, embed_std: float = 1.0) -> Transformer:
        """Fan-in scaled random weights: peaked, context-dependent next-token laws, for the random
        models and the exactness harness (the 0.02 init above gives near-uniform ones)."""
        for p in self.parameters():
            if p.dim() == 2:
                p.normal_(0, p.shape[1] ** -0.5)
        self.embed.weight.normal_(0, embed_std)
        return self

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def max_seq_len(self) -> int:
        return self.config.max_seq_len

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        p = self.head.weight
        return KVCache(
            self.config.n_layers,
            rows,
            self.config.kv_heads,
            capacity,
            self.config.head_dim,
            dtype=p.dtype,
            device=p.device,
        )

    def hidden(
        self,
        x: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Final-normed hidden states [R, T, dim] of input embeddings ``x`` [R, T, dim]; the rest of
        the call is the model interface's. ``rope``: the family's own cos/sin tables [R, 1, T,
        head_dim/2] in ``x``'s dtype (rotate-half convention), instead of 1-D RoPE of ``positions``."""
        if rope is None:
            if positions is None:
                positions = torch.arange(x.shape[1], device=x.device).expand(x.shape[:2])
            rope = rope_angles(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        if mask is not None:
            mask = mask.to(x.dtype)
        for layer in self.layers:
            x = layer(x, rope, mask, cache)
        return self.norm(x)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        return self.head(self.hidden(self.embed(tokens), positions, mask, cache)).float()


# --- other checkpoints' names ---------------------------------------------------------------------

NameMap = dict[str, str | tuple[str, ...]]
"""Our key (``{i}``: each layer) -> a checkpoint's key, or the keys whose tensors stack row-wise into one
fused weight of ours (q, k, v into ``attn.qkv``; gate, up into ``ffn.gate_up``)."""


def fused_rows(cfg: TransformerConfig) -> dict[str, tuple[int, ...]]:
    """Row blocks of our fused per-layer weights, in the order they stack."""
    qk, kv, ffn = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.hidden_dim
    return {"attn.qkv.weight": (qk, kv, kv), "ffn.gate_up.weight": (ffn, ffn)}


def _names(names: NameMap, n_layers: int):
    for ours, theirs in names.items():
        for i in range(n_layers) if "{i}" in ours else (None,):
            key = ours.format(i=i)
            other = tuple(t.format(i=i) for t in theirs) if isinstance(theirs, tuple) else theirs.format(i=i)
            yield ours.removeprefix("layers.{i}."), key, other


def rename_state(
    state: dict[str, torch.Tensor], names: NameMap, cfg: TransformerConfig, what: str
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(A checkpoint's tensors under our names, its tensors the map does not name). Fused weights are
    new tensors, the others the given ones; a key the map names and the checkpoint lacks is a
    :class:`WeightsError` naming ``what``."""
    used: set[str] = set()

    def get(key: str) -> torch.Tensor:
        if key not in state:
            raise WeightsError(f"{what} has no {key}: is it a {cfg.n_layers}-layer model of this family?")
        used.add(key)
        return state[key]

    ours = {
        key: torch.cat([get(k) for k in theirs]) if isinstance(theirs, tuple) else get(theirs)
        for _, key, theirs in _names(names, cfg.n_layers)
    }
    return ours, {k: state[k] for k in state if k not in used}  # unused keys only: a lazy state reads no more


def unrename_state(state: dict[str, torch.Tensor], names: NameMap, cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """Our tensors under a checkpoint's names (fused weights split): what :func:`rename_state` reads."""
    rows = fused_rows(cfg)
    out: dict[str, torch.Tensor] = {}
    for local, key, theirs in _names(names, cfg.n_layers):
        if isinstance(theirs, tuple):
            out.update(zip(theirs, state[key].split(rows[local]), strict=True))
        else:
            out[theirs] = state[key]
    return out


def save_transformer(model: Transformer, path: str | Path, dtype: torch.dtype = torch.float16) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path), metadata={"config": json.dumps(asdict(model.config))})


def check_finite(state: dict, path) -> None:
    """Weights that parse but hold NaN/inf give NaN logits and garbage samples: refuse them at load."""
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise WeightsError(
            f"weights in {path} hold NaN or infinite values ({', '.join(bad[:3])}"
            f"{', ...' if len(bad) > 3 else ''}): the file is corrupted"
        )


def load_transformer(
    path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> Transformer:
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"model weights not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            cfg = TransformerConfig(**json.loads(f.metadata()["config"]))
            state = {k: f.get_tensor(k) for k in f.keys()}
        model = Transformer(cfg)
        model.load_state_dict(state)
    except Exception as e:  # any parse or shape failure means the file is not what it claims
        raise WeightsError(f"cannot load model weights from {path}: {e}") from e
    check_finite(state, path)
    return model.to(device=device, dtype=dtype).eval()
