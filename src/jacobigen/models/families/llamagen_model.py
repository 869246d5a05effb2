"""LlamaGen's GPT on our decoder (:class:`~jacobigen.models.transformer.Transformer`): a config, a name
map from LlamaGen's checkpoint keys to ours, and what is LlamaGen's own (class / caption embedding, 2-D
RoPE that is zero on condition tokens). Reading its checkpoints is :mod:`.llamagen`.

Architecture facts from FoundationVision/LlamaGen ``autoregressive/models/gpt.py``: Llama blocks
(``attention.wqkv`` fused [q, k, v], ``attention.wo``, ``feed_forward.w1/w2/w3`` SwiGLU with hidden
``find_multiple(int(2 * 4 * dim / 3) * ffn_dim_multiplier, 256)``, RMSNorm computed in float), 2-D RoPE
on interleaved pairs (first half of the pairs rotated by the row, second half by the column), and
condition tokens whose RoPE table rows are all zero (their queries and keys are zero vectors).

Our decoder rotates halves (pair ``j`` is entries ``j`` and ``j + head_dim/2``), so the name map
reorders each q and k head's rows at load, pairs' first entries then their second (attention scores
are q.k, unchanged when q and k are reordered alike); v and the output projection are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ...core.cache import KVCache
from ...core.errors import ConfigError, WeightsError
from ..transformer import NameMap, Transformer, TransformerConfig, _names, unrename_state


@dataclass(frozen=True)
class LlamaGenConfig:
    dim: int
    n_layer: int
    n_head: int
    n_kv_head: int | None = None
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    vocab_size: int = 16384  # VQ codes
    model_type: str = "c2i"
    num_classes: int = 1000
    caption_dim: int = 2048
    cls_token_num: int = 1
    block_size: int = 256  # image tokens (a square grid)
    bank_prompts: int = 16  # t2i: distinct captions one call conditions on

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def hidden_dim(self) -> int:
        h = int(2 * 4 * self.dim / 3)
        if self.ffn_dim_multiplier is not None:
            h = int(self.ffn_dim_multiplier * h)
        return -(-h // self.multiple_of) * self.multiple_of

    @property
    def grid(self) -> int:
        return int(round(self.block_size**0.5))

    @property
    def cond_ids(self) -> int:
        """Condition slots after the codes: labels + null label, or the caption bank + uncond rows."""
        if self.model_type == "c2i":
            return self.num_classes + 1
        return (self.bank_prompts + 1) * self.cls_token_num

    def decoder(self) -> TransformerConfig:
        """Our decoder's config: the codes are its vocabulary, its positions the prompt and the grid."""
        return TransformerConfig(
            vocab_size=self.vocab_size,
            dim=self.dim,
            n_layers=self.n_layer,
            n_heads=self.n_head,
            n_kv_heads=self.n_kv_head,
            ffn_dim=self.hidden_dim,
            max_seq_len=self.cls_token_num + self.block_size,
            rope_theta=self.rope_base,
            norm_eps=self.norm_eps,
        )


# LlamaGen's checkpoint keys of the decoder -> ours (``backbone.`` in :class:`LlamaGen`)
NAMES: NameMap = {
    "embed.weight": "tok_embeddings.weight",
    "layers.{i}.attn_norm.weight": "layers.{i}.attention_norm.weight",
    "layers.{i}.attn.qkv.weight": "layers.{i}.attention.wqkv.weight",
    "layers.{i}.attn.out.weight": "layers.{i}.attention.wo.weight",
    "layers.{i}.ffn_norm.weight": "layers.{i}.ffn_norm.weight",
    "layers.{i}.ffn.gate_up.weight": ("layers.{i}.feed_forward.w1.weight", "layers.{i}.feed_forward.w3.weight"),
    "layers.{i}.ffn.down.weight": "layers.{i}.feed_forward.w2.weight",
    "norm.weight": "norm.weight",
    "head.weight": "output.weight",
}
BACKBONE = "backbone."


def _pairs_to_halves(c: LlamaGenConfig) -> torch.Tensor:
    """Row order of our fused q/k/v weight, as rows of LlamaGen's: each q and k head's pair entries
    (0, 1), (2, 3), ... become halves (0, 2, ...), (1, 3, ...); v rows stay."""
    hd = c.head_dim
    head = torch.cat([torch.arange(0, hd, 2), torch.arange(1, hd, 2)])
    qk = (torch.arange(c.n_head + c.kv_heads)[:, None] * hd + head).flatten()
    return torch.cat([qk, torch.arange(qk.numel(), (c.n_head + 2 * c.kv_heads) * hd)])


def stream_checkpoint(
    state: dict[str, torch.Tensor],
    c: LlamaGenConfig,
    path: Path,
    dtype: torch.dtype,
    device: str | torch.device,
    quantize: str | None = None,
) -> LlamaGen:
    """:class:`LlamaGen` filled from LlamaGen's (memory-mapped) state dict without ``freqs_cis``, tensor
    by tensor (:mod:`.stream`): each q/k head's rows reordered as its q/k/v weight is read, each linear
    of the decoder quantized to ``quantize`` as it is filled; a key nothing reads is a WeightsError."""
    from .stream import Tensors, fill, stream_module

    with torch.device("meta"):  # no random init of weights that are about to be replaced
        model = LlamaGen(c)
    order = _pairs_to_halves(c)
    source = Tensors(state, path, lambda key, t: t[order] if key.endswith(".attention.wqkv.weight") else t)
    entries = [(BACKBONE + key, theirs) for _, key, theirs in _names(NAMES, c.n_layer)]
    fill(model, entries, source, dtype, device, quantize)
    stream_module(model.cls_embedding, "cls_embedding.", source, dtype, device)
    if source.unused():
        raise WeightsError(f"{path} holds tensors a LlamaGen GPT does not, e.g. {source.unused()[:3]}")
    return model.eval()


def to_checkpoint(model: LlamaGen) -> dict[str, torch.Tensor]:
    """:class:`LlamaGen`'s weights under LlamaGen's names and layout, as its checkpoints hold them."""
    c = model.config
    state = model.state_dict()
    ours = {k.removeprefix(BACKBONE): v for k, v in state.items() if k.startswith(BACKBONE)}
    undo = torch.argsort(_pairs_to_halves(c))
    for i in range(c.n_layer):
        key = f"layers.{i}.attn.qkv.weight"
        ours[key] = ours[key][undo]
    rest = {k: v for k, v in state.items() if not k.startswith(BACKBONE)}
    return {**unrename_state(ours, NAMES, c.decoder()), **rest}


class LabelEmbedder(nn.Module):
    def __init__(self, c: LlamaGenConfig):
        super().__init__()
        self.embedding_table = nn.Embedding(c.num_classes + 1, c.dim)

    def forward(self, slots):
        return self.embedding_table(slots)


class CaptionEmbedder(nn.Module):
    """cap_proj MLP over T5 embeddings; slots index a bank whose first rows are ``uncond_embedding``."""

    def __init__(self, c: LlamaGenConfig):
        super().__init__()
        self.cap_proj = nn.Module()
        self.cap_proj.fc1 = nn.Linear(c.caption_dim, c.dim, bias=False)
        self.cap_proj.fc2 = nn.Linear(c.dim, c.dim, bias=False)
        self.register_buffer("uncond_embedding", torch.zeros(c.cls_token_num, c.caption_dim))
        self.c = c

    def bank(self, captions: list[torch.Tensor]) -> torch.Tensor:
        """The bank of one call's captions (each [<=cls_token_num, caption_dim]): the unconditional
        rows, then caption i at slot i + 1."""
        n = self.c.cls_token_num
        if len(captions) > self.c.bank_prompts:
            raise ConfigError(
                f"LlamaGen t2i conditions on at most {self.c.bank_prompts} distinct prompts per call, "
                f"got {len(captions)}: split them into several calls"
            )
        bank = self.uncond_embedding.new_zeros(self.c.cond_ids, self.c.caption_dim)
        bank[:n] = self.uncond_embedding
        for slot, caption in enumerate(captions, 1):
            bank[slot * n : slot * n + caption.shape[0]] = caption.to(bank)
        return bank

    def forward(self, slots, bank=None):
        """``bank`` None: the unconditional rows only, for forwards without captions (image tokens,
        unconditional prompts); captions condition through their call's bank (:class:`Captioned`)."""
        e = bank[slots] if bank is not None else self.uncond_embedding[slots.clamp(max=self.c.cls_token_num - 1)]
        e = e.to(self.cap_proj.fc1.weight.dtype)
        return self.cap_proj.fc2(F.gelu(self.cap_proj.fc1(e), approximate="tanh"))


class LlamaGen(nn.Module):
    """The GPT behind our model interface: LlamaGen's condition embedding around our decoder
    (``backbone``: its ``embed`` and ``head`` are LlamaGen's code embedding and output). The grid index
    of an image token is its position minus its row's prompt length: the decoders pass ``prompt_len``
    [R] (``needs_prompt_len``); without it, the block's condition tokens are counted (a prefill or an
    uncached forward). Checkpoints load through :func:`stream_checkpoint`."""

    needs_prompt_len = True

    def __init__(self, c: LlamaGenConfig):
        super().__init__()
        if c.grid**2 != c.block_size:
            raise ConfigError(f"block_size {c.block_size} is not a square grid")
        self.config = c
        self.cls_embedding = LabelEmbedder(c) if c.model_type == "c2i" else CaptionEmbedder(c)
        self.backbone = Transformer(c.decoder())

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size + self.config.cond_ids

    @property
    def max_seq_len(self) -> int:
        return self.config.cls_token_num + self.config.block_size

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        return self.backbone.new_cache(rows, capacity)

    def rope(self, tokens, positions, prompt_len=None, dtype=torch.float32):
        """cos/sin [R, 1, T, head_dim/2]: zero for condition tokens, 2-D (row, col) for image tokens."""
        c = self.config
        is_image = tokens < c.vocab_size
        if prompt_len is None:
            prompt_len = (~is_image).sum(1)
        g = (positions - prompt_len[:, None]).clamp(min=0)
        quarter = c.head_dim // 4
        freqs = c.rope_base ** (-torch.arange(0, 2 * quarter, 2, device=tokens.device).float() / (2 * quarter))
        ang = torch.cat([(g // c.grid)[..., None] * freqs, (g % c.grid)[..., None] * freqs], dim=-1)
        on = is_image[..., None].float()
        return (ang.cos() * on)[:, None].to(dtype), (ang.sin() * on)[:, None].to(dtype)

    def forward(self, tokens, positions=None, mask=None, cache=None, prompt_len=None, bank=None):
        """``bank``: a t2i call's caption bank (:class:`Captioned` passes it)."""
        c, b = self.config, self.backbone
        if positions is None:
            positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        is_image = (tokens < c.vocab_size)[..., None]
        img = b.embed(tokens.clamp(max=c.vocab_size - 1))
        slots = (tokens - c.vocab_size).clamp(0, c.cond_ids - 1)
        cond = (self.cls_embedding(slots) if c.model_type == "c2i" else self.cls_embedding(slots, bank)).to(img.dtype)
        x = torch.where(is_image, img, cond)
        rope = self.rope(tokens, positions, prompt_len, x.dtype)
        logits = b.head(b.hidden(x, mask=mask, cache=cache, rope=rope)).float()
        return torch.cat([logits, logits.new_full((*logits.shape[:2], c.cond_ids), float("-inf"))], -1)


class Captioned(nn.Module):
    """A t2i GPT with one call's caption bank: what a call's encoded prompts condition, so that
    encoding never writes into the model."""

    needs_prompt_len = True

    def __init__(self, gpt: LlamaGen, bank: torch.Tensor):
        super().__init__()
        self.gpt = gpt
        self.register_buffer("bank", bank, persistent=False)

    @property
    def vocab_size(self) -> int:
        return self.gpt.vocab_size

    @property
    def max_seq_len(self) -> int:
        return self.gpt.max_seq_len

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        return self.gpt.new_cache(rows, capacity)

    def forward(self, tokens, positions=None, mask=None, cache=None, prompt_len=None):
        return self.gpt(tokens, positions, mask, cache, prompt_len, self.bank)
