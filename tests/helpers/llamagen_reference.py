"""LlamaGen's GPT written as its ``autoregressive/models/gpt.py`` computes, on LlamaGen's own checkpoint
keys: the independent reference that our LlamaGen (our decoder plus a name map) is checked against.

This is the block stack the package ran LlamaGen on before every family moved onto
:class:`jacobigen.models.transformer.Transformer`: separate ``wqkv`` / ``w1, w3`` projections, RoPE on
interleaved pairs computed in float, RMSNorm in float, grouped K/V heads repeated per query head.
Only the condition embedders (LlamaGen's own modules, not under test here) are the package's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from jacobigen.core.cache import KVCache
from jacobigen.models.families.llamagen_model import CaptionEmbedder, LabelEmbedder, LlamaGenConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotate_pairs(x, rope):
    """LlamaGen's rotary: consecutive pairs (x0, x1) rotated, computed in float. x [R, T, H, D]."""
    cos, sin = rope
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xf[..., 0], xf[..., 1]
    return torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1).flatten(-2).type_as(x)


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


class ReferenceGPT(nn.Module):
    """Our model interface (ids ``>= codes`` are condition slots, as :class:`LlamaGen`'s), LlamaGen's
    keys: ``load_state_dict`` takes a LlamaGen checkpoint as it is."""

    def __init__(self, c: LlamaGenConfig):
        super().__init__()
        self.config = c
        self.cls_embedding = LabelEmbedder(c) if c.model_type == "c2i" else CaptionEmbedder(c)
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(Block(c, i) for i in range(c.n_layer))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.output = nn.Linear(c.dim, c.vocab_size, bias=False)

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        c = self.config
        return KVCache(c.n_layer, rows, c.kv_heads, capacity, c.head_dim)

    def rope(self, tokens, positions, prompt_len=None):
        """cos/sin [R, T, 1, head_dim/2]: zero for condition tokens, 2-D (row, col) for image tokens."""
        c = self.config
        is_image = tokens < c.vocab_size
        if prompt_len is None:
            prompt_len = (~is_image).sum(1)
        g = (positions - prompt_len[:, None]).clamp(min=0)
        quarter = c.head_dim // 4
        freqs = c.rope_base ** (-torch.arange(0, 2 * quarter, 2).float() / (2 * quarter))
        ang = torch.cat([(g // c.grid)[..., None] * freqs, (g % c.grid)[..., None] * freqs], dim=-1)
        on = is_image[..., None].float()
        return (ang.cos() * on)[:, :, None], (ang.sin() * on)[:, :, None]

    def forward(self, tokens, positions=None, mask=None, cache=None, prompt_len=None, bank=None):
        c = self.config
        if positions is None:
            positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        is_image = (tokens < c.vocab_size)[..., None]
        img = self.tok_embeddings(tokens.clamp(max=c.vocab_size - 1))
        slots = (tokens - c.vocab_size).clamp(0, c.cond_ids - 1)
        cond = self.cls_embedding(slots) if c.model_type == "c2i" else self.cls_embedding(slots, bank)
        x = torch.where(is_image, img, cond.to(img.dtype))
        rope = self.rope(tokens, positions, prompt_len)
        for layer in self.layers:
            x = layer(x, rope, mask, cache)
        logits = self.output(self.norm(x)).float()
        return torch.cat([logits, logits.new_full((*logits.shape[:2], c.cond_ids), float("-inf"))], -1)


def reference_of(model) -> ReferenceGPT:
    """The reference GPT holding ``model``'s weights, read back from LlamaGen's checkpoint layout."""
    from jacobigen.models.families.llamagen_model import to_checkpoint

    ref = ReferenceGPT(model.config)
    ref.load_state_dict(to_checkpoint(model))
    return ref.eval()
