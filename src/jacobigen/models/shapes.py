"""The named shapes of ``jacobigen plan --shape``: the published models' stacks, for a plan without
their checkpoint (a checkpoint folder is planned from its own ``config.json`` by
:func:`jacobigen.models.memory.shape_of`, through the loaders' config parsers)."""

from __future__ import annotations

from dataclasses import replace

from ..core.errors import ConfigError
from .memory import Shape, lumina_tokens


def _llama(name, dim, layers, heads, kv, hidden, vocab, image, **kw) -> Shape:
    kw.setdefault("streamed", True)  # every family streams its checkpoint (models/families/stream.py)
    return Shape(
        name, dim, layers, heads, kv, dim // heads, hidden, vocab, kw.pop("logits", vocab), image_tokens=image, **kw
    )


def _janus(name: str, dim: int, layers: int, heads: int, hidden: int) -> Shape:
    # the language model with its text head (held, unused); image side: generation_embeddings
    # [16384, 8], generation_aligner 8 -> dim -> dim, generation_head dim -> dim -> 16384; logits
    # cover text and image ids; 24 x 24 codes, no end-of-line tokens
    codes = 16384
    return _llama(
        name, dim, layers, heads, heads, hidden, 102400, 576, logits=102400 + codes, head=102400,
        extra_linear=((dim, 8), (dim, dim), (dim, dim), (codes, dim)), extra_params=codes * 8,
        note=f"Janus-Pro-{name.split('-')[-1].upper()}: 384 px, 24 x 24 codes",
    )  # fmt: skip


def _llamagen(name: str, dim: int, layers: int, heads: int, grid: int) -> Shape:
    hidden = -(-int(2 * 4 * dim / 3) // 256) * 256
    return _llama(
        name,
        dim,
        layers,
        heads,
        heads,
        hidden,
        16384 + 1001,
        grid * grid,
        logits=16384 + 1001,
        head=16384,
        prompt_tokens=1,
        note=f"LlamaGen c2i GPT-{name.split('-')[1].upper()}, {grid * 16} px: {grid} x {grid} codes",
    )  # class ids follow the codes in our id space (1000 classes + the null label)


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in [
        _llama("lumina-mgpt-7b", 4096, 32, 32, 32, 11008, 65536, lumina_tokens(768), qk_norm=True,
               note="Lumina-mGPT-7B-768 (Chameleon-7B's stack), 768 px: 48 x 48 codes + end-of-line tokens"),
        _llama("lumina-mgpt-7b-1024", 4096, 32, 32, 32, 11008, 65536, lumina_tokens(1024), qk_norm=True,
               note="Lumina-mGPT-7B-1024, 1024 px"),
        _llama("lumina-mgpt-34b", 8192, 48, 64, 8, 22016, 65536, lumina_tokens(512), qk_norm=True,
               note="Lumina-mGPT-34B-512 (Chameleon-34B's stack), 512 px"),
        _llama("anole-7b", 4096, 32, 32, 32, 11008, 65536, 1025, qk_norm=True,
               note="Anole-7b: 32 x 32 codes, no end-of-line tokens"),
        _janus("janus-pro-7b", 4096, 30, 32, 11008),
        _janus("janus-pro-1b", 2048, 24, 16, 5632),
        _llama("emu3-gen", 4096, 32, 32, 8, 14336, 184622, 90 * 91 + 1,
               note="Emu3-Gen (8B), 720 px: 90 x 90 codes + end-of-line tokens"),
        _llamagen("llamagen-xl-384", 1280, 36, 20, 24),
        _llamagen("llamagen-3b-384", 3200, 24, 32, 24),
        _llama("cosmos-4b", 4096, 16, 32, 8, 14336, 64000, 7680, qk_norm=True, cfg=False, prompt_tokens=5120,
               note="Cosmos-1.0-Autoregressive-4B: 2 latent frames of 40 x 64 given, 3 sampled"),
        _llama("cosmos-12b", 5120, 40, 32, 8, 14336, 64000, 7680, qk_norm=True, cfg=False, prompt_tokens=5120,
               note="Cosmos-1.0-Autoregressive-12B"),
    ]
}  # fmt: skip
# the head_dim of Cosmos-12B is 128 (32 heads of 128 over a width of 5120)
SHAPES["cosmos-12b"] = replace(SHAPES["cosmos-12b"], head_dim=128)


def named(name: str) -> Shape:
    try:
        return SHAPES[name]
    except KeyError:
        raise ConfigError(f"unknown shape {name!r}: use one of {', '.join(SHAPES)}") from None
