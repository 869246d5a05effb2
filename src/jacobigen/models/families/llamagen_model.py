"""LlamaGen's GPT as a module of ours, with LlamaGen's own parameter names (so its checkpoints load
by key; reading them is :mod:`.llamagen`).

Architecture facts from FoundationVision/LlamaGen ``autoregressive/models/gpt.py``: Llama blocks
(``attention.wqkv`` fused [q, k, v], ``attention.wo``, ``feed_forward.w1/w2/w3`` SwiGLU with hidden
``find_multiple(int(2 * 4 * dim / 3) * ffn_dim_multiplier, 256)``, RMSNorm computed in float), 2-D RoPE
on interleaved pairs (first half of the pairs rotated by the row, second half by the column), and
condition tokens whose RoPE table rows are all zero (their queries and keys are zero vectors).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...core.cache import KVCache
from ...core.errors import ConfigError


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


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class Attention(nn.Module):
    def __init__(self, c: LlamaGenConfig, layer: int):
        super().__init__()
        self.c, self.layer = c, layer
        self.wqkv = nn.Linear(c.dim, (c.n_head + 2 * c.kv_heads) * c.head_dim, bias=False)
        self.wo = nn.Linear(c.dim, c.dim, bias=False)

    def forward(self, x, rope, mask, cache):
        c, (r, t, _) = self.c, x.shape
        kv = c.kv_heads * c.head_dim
        q, k, v = self.wqkv(x).split([c.dim, kv, kv], dim=-1)
        q = rotate_pairs(q.view(r, t, c.n_head, c.head_dim), rope).transpose(1, 2)
        k = rotate_pairs(k.view(r, t, c.kv_heads, c.head_dim), rope).transpose(1, 2)
        v = v.view(r, t, c.kv_heads, c.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)
        rep = c.n_head // c.kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        return self.wo(y.transpose(1, 2).reshape(r, t, -1))


class FeedForward(nn.Module):
    def __init__(self, c: LlamaGenConfig):
        super().__init__()
        self.w1 = nn.Linear(c.dim, c.hidden_dim, bias=False)
        self.w3 = nn.Linear(c.dim, c.hidden_dim, bias=False)
        self.w2 = nn.Linear(c.hidden_dim, c.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c: LlamaGenConfig, layer: int):
        super().__init__()
        self.attention = Attention(c, layer)
        self.feed_forward = FeedForward(c)
        self.attention_norm = RMSNorm(c.dim, c.norm_eps)
        self.ffn_norm = RMSNorm(c.dim, c.norm_eps)

    def forward(self, x, rope, mask, cache):
        h = x + self.attention(self.attention_norm(x), rope, mask, cache)
        return h + self.feed_forward(self.ffn_norm(h))


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
    """The GPT behind our model interface; state-dict keys are LlamaGen's. The grid index of an image
    token is its position minus its row's prompt length: the decoders pass ``prompt_len`` [R]
    (``needs_prompt_len``); without it, the block's condition tokens are counted (a prefill or an
    uncached forward)."""

    needs_prompt_len = True

    def __init__(self, c: LlamaGenConfig):
        super().__init__()
        if c.grid**2 != c.block_size:
            raise ConfigError(f"block_size {c.block_size} is not a square grid")
        self.config = c
        self.cls_embedding = LabelEmbedder(c) if c.model_type == "c2i" else CaptionEmbedder(c)
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(Block(c, i) for i in range(c.n_layer))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.output = nn.Linear(c.dim, c.vocab_size, bias=False)

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size + self.config.cond_ids

    @property
    def max_seq_len(self) -> int:
        return self.config.cls_token_num + self.config.block_size

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        p = self.output.weight
        c = self.config
        return KVCache(c.n_layer, rows, c.kv_heads, capacity, c.head_dim, dtype=p.dtype, device=p.device)

    def rope(self, tokens, positions, prompt_len=None):
        """cos/sin [R, T, 1, head_dim/2]: zero for condition tokens, 2-D (row, col) for image tokens."""
        c = self.config
        is_image = tokens < c.vocab_size
        if prompt_len is None:
            prompt_len = (~is_image).sum(1)
        g = (positions - prompt_len[:, None]).clamp(min=0)
        quarter = c.head_dim // 4
        freqs = c.rope_base ** (-torch.arange(0, 2 * quarter, 2, device=tokens.device).float() / (2 * quarter))
        ang = torch.cat([(g // c.grid)[..., None] * freqs, (g % c.grid)[..., None] * freqs], dim=-1)
        on = is_image[..., None].float()
        return (ang.cos() * on)[:, :, None], (ang.sin() * on)[:, :, None]

    def forward(self, tokens, positions=None, mask=None, cache=None, prompt_len=None, bank=None):
        """``bank``: a t2i call's caption bank (:class:`Captioned` passes it)."""
        c = self.config
        if positions is None:
            positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        is_image = (tokens < c.vocab_size)[..., None]
        img = self.tok_embeddings(tokens.clamp(max=c.vocab_size - 1))
        slots = (tokens - c.vocab_size).clamp(0, c.cond_ids - 1)
        cond = (self.cls_embedding(slots) if c.model_type == "c2i" else self.cls_embedding(slots, bank)).to(img.dtype)
        x = torch.where(is_image, img, cond)
        rope = self.rope(tokens, positions, prompt_len)
        if mask is not None:
            mask = mask.to(x.dtype)
        for layer in self.layers:
            x = layer(x, rope, mask, cache)
        logits = self.output(self.norm(x)).float()
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


def rotate_pairs(x, rope):
    """LlamaGen's rotary: consecutive pairs (x0, x1) rotated, computed in float."""
    cos, sin = rope
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xf[..., 0], xf[..., 1]
    return torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1).flatten(-2).type_as(x)


# --- checkpoints ----------------------------------------------------------------------------------
