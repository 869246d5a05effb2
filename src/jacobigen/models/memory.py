"""A memory plan before any weight loads: weights, KV cache, decode buffers and activations.

``plan(shape, ...)`` needs only a model's shape (:class:`Shape`: from a config, a named shape in
:data:`SHAPES`, or a checkpoint's ``config.json``) and the decode's settings; it counts

- **weights**: every parameter at the model's dtype, the linear layers' at their quantization
  (int8: a byte per weight and 5 bytes per output row, torchao's Int8Tensor; int4: half a byte per
  weight and a bf16 scale and zero per 128 weights, torchao's tile-packed int4);
- **KV cache**: keys and values of every layer for each model row (a sequence holds two rows under
  CFG), over the slots the decoder allocates: prompt + image tokens + a window, rounded up to 64;
- **buffers**: the decoder's per-sequence float32 tables over the vocabulary (targets, drafts' q,
  history: ``PER_SLOT`` tables of window + 1 rows, :mod:`jacobigen.core.limits`);
- **activations**: the live tensors of one layer for the widest block the decoder runs (the prompt's
  prefill or a window): residual stream, q/k/v, the float mask, the MLP's, and off CUDA the attention
  scores over the whole cache (SDPA's math path); plus the logits in the model's dtype and in float32.
  An upper estimate of the peak, not a measurement.

and sets them against the memory free on the device (:func:`jacobigen.core.limits.free_memory`,
``JACOBIGEN_DEVICE_MEMORY`` to set it). Like the decoder, it plans the cache, buffers and
activations on at most half of what the weights leave free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..core.cache import cache_slots
from ..core.errors import ConfigError
from ..core.limits import BUDGET, MEMORY_ENV, PER_SLOT, free_memory, size

PROMPT_TOKENS = 64  # a text prompt's tokens when no prompt is given (the families' templates hold 20-40)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class Shape:
    """What the plan needs of a model: its Llama-shaped stack, vocabulary and default image."""

    name: str
    dim: int
    n_layers: int
    n_heads: int
    kv_heads: int
    head_dim: int
    hidden: int  # MLP width (SwiGLU: gate, up and down projections)
    vocab: int  # input embedding rows
    logits: int  # ids the logits cover
    tied: bool = False  # head = input embedding
    head: int | None = None  # output head rows (None: ``logits``)
    qk_norm: bool = False  # a weight and bias per head on q and k
    extra_linear: tuple[tuple[int, int], ...] = ()  # other linear layers [out, in] (a family's image head)
    extra_params: int = 0  # other unquantized parameters (a family's image embedding, class table)
    image_tokens: int = 0  # the layout's tokens at the default size, structural ones included
    prompt_tokens: int = PROMPT_TOKENS
    cfg: bool = True  # guided by default (two model rows per sequence)
    note: str = ""

    def linears(self) -> list[tuple[int, int, int]]:
        """(out, in, count) of every linear layer."""
        qkv = (self.n_heads + 2 * self.kv_heads) * self.head_dim
        out = [
            (qkv, self.dim, self.n_layers),
            (self.dim, self.n_heads * self.head_dim, self.n_layers),
            (2 * self.hidden, self.dim, self.n_layers),
            (self.dim, self.hidden, self.n_layers),
        ]
        if not self.tied:
            out.append((self.head or self.logits, self.dim, 1))
        return out + [(o, i, 1) for o, i in self.extra_linear]

    def other_params(self) -> int:
        """Parameters outside the linear layers: embeddings, norms, q/k norms."""
        norms = self.n_layers * 2 * self.dim + self.dim
        qk = self.n_layers * 2 * (self.n_heads + self.kv_heads) * self.head_dim if self.qk_norm else 0
        return self.vocab * self.dim + norms + qk + self.extra_params

    @property
    def parameters(self) -> int:
        return sum(o * i * n for o, i, n in self.linears()) + self.other_params()


def linear_bytes(out: int, inp: int, dtype: torch.dtype, quantize: str | None) -> int:
    """Bytes of one [out, in] linear weight as stored."""
    if quantize is None:
        return out * inp * dtype.itemsize
    if quantize == "int8":  # Int8Tensor: int8 weights, a float32 scale and an int8 zero point per row
        return out * inp + 5 * out
    if quantize == "int4":  # tile-packed int4: two weights a byte, a bf16 (scale, zero) per 128 weights
        return out * inp // 2 + out * -(-inp // 128) * 4
    raise ConfigError(f"unknown quantization {quantize!r}")


def weight_bytes(shape: Shape, dtype: torch.dtype, quantize: str | None = None) -> int:
    """Bytes of a model of ``shape`` whose linear layers are quantized to ``quantize`` (int4 runs in bf16)."""
    if quantize == "int4":
        dtype = torch.bfloat16
    linear = sum(n * linear_bytes(o, i, dtype, quantize) for o, i, n in shape.linears())
    return linear + shape.other_params() * dtype.itemsize


@dataclass(frozen=True)
class Plan:
    shape: Shape
    device: str
    dtype: torch.dtype
    quantize: str | None
    batch: int  # sequences decoded together
    rows: int  # model rows (batch x 2 under CFG)
    window: int
    prompt: int
    capacity: int  # cache slots per row
    weights: int
    cache: int
    buffers: int
    activations: int
    block: int  # tokens of the widest block (the activations' size)
    free: int | None  # bytes free on the device (None: unknown)
    loading: int = 0  # the weights at the model's dtype: they load so, then are quantized

    @property
    def load_dtype(self) -> torch.dtype:
        """The dtype the weights load at, and the activations and cache run at (int4 runs in bf16)."""
        return torch.bfloat16 if self.quantize == "int4" else self.dtype

    @property
    def peak_loading(self) -> int:
        """Bytes while the weights load: at their dtype before quantization (the widest layer's
        quantized copy besides them is small enough to leave out)."""
        return max(self.loading, self.weights)

    @property
    def working(self) -> int:
        return self.cache + self.buffers + self.activations

    @property
    def total(self) -> int:
        return self.weights + self.working

    @property
    def fits(self) -> bool:
        if self.free is None:
            return True
        return max(self.total, self.peak_loading) <= self.free and self.working <= BUDGET * (self.free - self.weights)

    def lines(self) -> list[str]:
        s, n = self.shape, self.batch
        weights = self.quantize or str(self.dtype).removeprefix("torch.")
        head = f"memory plan: {s.name} on {self.device}, weights {weights}"
        if self.quantize:
            head += f" (activations and cache {str(self.load_dtype)[6:]})"
        guided = " x 2 for CFG" if self.rows > n else ""
        out = [
            head,
            f"  weights      {size(self.weights):>10}  ({count(s.parameters)} parameters)",
            f"  KV cache     {size(self.cache):>10}  ({self.rows} rows = {n} sequence(s){guided}; {self.capacity:,} "
            f"slots each: {self.prompt} prompt + {s.image_tokens:,} image + {self.window} window tokens, rounded up)",
            f"  buffers      {size(self.buffers):>10}  ({PER_SLOT} float32 tables of {self.window + 1} x "
            f"{s.logits:,} per sequence)",
            f"  activations  {size(self.activations):>10}  (one layer and the logits for the widest block: "
            f"{self.block:,} tokens x {self.rows} rows; an upper estimate)",
        ]
        if self.quantize:
            out.append(
                f"  loading      {size(self.peak_loading):>10}  (the weights load at "
                f"{str(self.load_dtype)[6:]}, then are quantized)"
            )
        if self.free is None:
            out.append(
                f"  total        {size(self.total):>10}  (free memory on {self.device} unknown: set "
                f"{MEMORY_ENV}, e.g. 24GiB, to plan against a budget)"
            )
        else:
            verdict = "fits" if self.fits else "does NOT fit"
            out.append(f"  total        {size(self.total):>10}  of {size(self.free)} free on {self.device}: {verdict}")
            if not self.fits and self.total <= self.free and self.peak_loading <= self.free:
                out.append(
                    f"  (cache, buffers and activations {size(self.working)} > {BUDGET:.0%} of the "
                    f"{size(self.free - self.weights)} the weights leave: the decoder plans on at most that)"
                )
        return out

    def text(self) -> str:
        return "\n".join(self.lines())

    def refusal(self) -> str:
        """The one-line error for a plan that does not fit, with its figures and what to change."""
        if self.free is not None and self.peak_loading > self.free:
            loads = f"its weights load at {str(self.load_dtype)[6:]} ({size(self.peak_loading)})"
            if self.quantize:
                loads += " before they are quantized"
            why = " (quantizing while loading is not done yet)" if self.quantize else ""
            return (
                f"{self.shape.name} does not fit on {self.device}: {loads}, and {size(self.free)} is free{why}; "
                "a machine with more memory is needed"
            )
        hints = []
        if self.quantize is None:
            hints.append("--quantize int8" + (" or int4" if self.device.startswith("cuda") else ""))
        elif self.quantize == "int8" and self.device.startswith("cuda"):
            hints.append("--quantize int4")
        if self.batch > 1:
            hints.append("a smaller --batch-size")
        if self.window > 1:
            hints.append("a smaller --window")
        weights = self.quantize or str(self.dtype)[6:]
        return (
            f"{self.shape.name} does not fit on {self.device}: weights {size(self.weights)} ({weights}) + KV cache "
            f"{size(self.cache)} + buffers {size(self.buffers)} + activations {size(self.activations)} = "
            f"{size(self.total)} for {self.batch} sequence(s) at window {self.window}, and {size(self.free or 0)} "
            f"is free (the decode plans on at most {BUDGET:.0%} of what the weights leave); try "
            f"{', '.join(hints) or 'a machine with more memory'} (`jacobigen generate --dry-run` prints the plan)"
        )


def plan(
    shape: Shape,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
    batch: int = 1,
    window: int = 32,
    cfg: bool | None = None,
    prompt: int | None = None,
    free: int | None | str = "measure",
) -> Plan:
    """The memory a decode of ``batch`` sequences of ``shape`` at ``window`` needs. ``dtype``: the
    model's (default: bf16 on CUDA, float32 elsewhere; int4 always runs in bf16); ``cfg``: two model
    rows per sequence (default: the shape's); ``free``: bytes free, or "measure" (the device's)."""
    device = torch.device(device)
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    act = torch.bfloat16 if quantize == "int4" else dtype
    b = act.itemsize
    guided = shape.cfg if cfg is None else cfg
    rows = batch * (2 if guided else 1)
    p = shape.prompt_tokens if prompt is None else prompt
    capacity = cache_slots(p, shape.image_tokens, window)
    cache = 2 * shape.n_layers * shape.kv_heads * shape.head_dim * capacity * rows * b
    buffers = batch * PER_SLOT * (window + 1) * shape.logits * 4
    block = max(window, p)
    t, c = block * rows, capacity
    qkv = (shape.n_heads + 2 * shape.kv_heads) * shape.head_dim
    # q/k/v and the mask; off CUDA also the scores and probabilities (SDPA's math path with a float mask;
    # CUDA's memory-efficient kernel never holds them)
    scores = 0 if device.type == "cuda" else 2 * rows * shape.n_heads * block * c
    attention = t * qkv + rows * block * c + scores
    mlp = 3 * t * shape.hidden
    activations = (2 * t * shape.dim + max(attention, mlp)) * b + t * shape.logits * (b + 4)
    measured = free_memory(device) if free == "measure" else free
    return Plan(
        shape,
        str(device),
        dtype,
        quantize,
        batch,
        rows,
        window,
        p,
        capacity,
        weight_bytes(shape, act, quantize),
        cache,
        buffers,
        activations,
        block,
        measured if isinstance(measured, int) else None,
        weight_bytes(shape, act),
    )


def fitting(shape: Shape, batch: int | None, wanted: int, **kwargs) -> Plan:
    """The plan for ``batch`` sequences (None: as many of ``wanted`` as fit, at least one), as the
    decoder chooses its batch."""
    if batch is not None:
        return plan(shape, batch=batch, **kwargs)
    best = plan(shape, batch=1, **kwargs)
    lo, hi = 1, wanted
    while lo < hi and best.fits:  # the largest batch that fits
        mid = (lo + hi + 1) // 2
        trial = plan(shape, batch=mid, **kwargs)
        if trial.fits:
            lo, best = mid, trial
        else:
            hi = mid - 1
    return best


def count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def table(shapes: list[Shape], **kwargs) -> str:
    """A markdown table: per shape, weights at bf16, int8 and int4, and the KV cache, buffers and
    activations of one decode (``kwargs``: :func:`plan`'s), with bf16 activations and cache."""
    head = (
        "| shape | parameters | tokens (prompt + image) | weights bf16 | int8 | int4 | KV cache | buffers | "
        "activations | total bf16 | int8 | int4 |\n" + "|---" * 12 + "|"
    )
    rows = [head]
    for shape in shapes:
        p = {q: plan(shape, dtype=torch.bfloat16, quantize=q, free=None, **kwargs) for q in (None, "int8", "int4")}
        b = p[None]
        rows.append(
            f"| `{shape.name}` | {count(shape.parameters)} | {b.prompt:,} + {shape.image_tokens:,} | "
            f"{size(b.weights)} | {size(p['int8'].weights)} | {size(p['int4'].weights)} | {size(b.cache)} | "
            f"{size(b.buffers)} | {size(b.activations)} | {size(b.total)} | {size(p['int8'].total)} | "
            f"{size(p['int4'].total)} |"
        )
    return "\n".join(rows)


# --- shapes -----------------------------------------------------------------------------------------


def from_config(cfg, name: str, image_tokens: int, **kw) -> Shape:
    """The shape of our decoder (:class:`~jacobigen.models.transformer.TransformerConfig`)."""
    return Shape(
        name,
        cfg.dim,
        cfg.n_layers,
        cfg.n_heads,
        cfg.kv_heads,
        cfg.head_dim,
        cfg.hidden_dim,
        cfg.vocab_size,
        cfg.vocab_size,
        tied=cfg.tie_embeddings,
        qk_norm=cfg.qk_norm is not None,
        image_tokens=image_tokens,
        **kw,
    )


def _llama(name, dim, layers, heads, kv, hidden, vocab, image, **kw) -> Shape:
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


def _lumina_side(side: int) -> int:
    g = side // 16
    return g * (g + 1) + 1  # rows of 2 tokens per 32 px, each with its end-of-line, then end-of-image


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
        _llama("lumina-mgpt-7b", 4096, 32, 32, 32, 11008, 65536, _lumina_side(768), qk_norm=True,
               note="Lumina-mGPT-7B-768 (Chameleon-7B's stack), 768 px: 48 x 48 codes + end-of-line tokens"),
        _llama("lumina-mgpt-7b-1024", 4096, 32, 32, 32, 11008, 65536, _lumina_side(1024), qk_norm=True,
               note="Lumina-mGPT-7B-1024, 1024 px"),
        _llama("lumina-mgpt-34b", 8192, 48, 64, 8, 22016, 65536, _lumina_side(512), qk_norm=True,
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


def shape_of(spec: str) -> Shape | None:
    """The shape of a ``--model`` spec without loading its weights: the shipped and random models
    from their configs, Chameleon / Lumina-mGPT / Anole / Janus / Emu3 checkpoints from their
    ``config.json``; None where only loading tells (LlamaGen and Cosmos files, which carry no config)."""
    from . import embedded as E

    if spec in ("default", "emoji", "emoji-video") or spec.partition(":")[0] in ("emoji", "emoji-video"):
        family, _, path = spec.partition(":")
        from .load import WEIGHTS

        folder = Path(path) if path else WEIGHTS / ("video" if family == "emoji-video" else "")
        cfg = _safetensors_config(folder / "ar.safetensors")
        if cfg is None:
            return None
        tokens = E.GRID * (E.GRID + 1) + 1
        if family == "emoji-video":
            tokens = cfg.max_seq_len  # a clip fills the model's positions
        return from_config(cfg, spec, tokens, prompt_tokens=16)
    if spec in ("random", "random-video"):
        return None  # a few MB: nothing to plan
    from .families import FAMILIES

    family, _, path = spec.partition(":")
    name = FAMILIES.get(family.lower())
    if name not in ("chameleon", "anole", "janus", "emu3", "lumina2") or not path:
        return None
    path, _, query = path.partition("?")
    config = Path(path).expanduser() / "config.json"
    if not config.is_file():
        return None
    try:
        cfg = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    text = cfg.get("text_config", cfg) if name in ("janus", "emu3") else cfg
    query_size = dict(p.partition("=")[::2] for p in query.split("&") if p).get("size")
    if name == "chameleon":
        from .families.chameleon import size_from_name

        side = int(query_size or 0) or size_from_name(Path(path).expanduser()) or 768
        tokens = _lumina_side(side)
    elif name == "anole":
        tokens = 1025
    elif name == "lumina2":  # 8 px per code, an end-of-line token per row
        g = int(query_size or 768) // 8
        tokens = g * (g + 1) + 1
    elif name == "emu3":
        g = int(query_size or 720) // 8
        tokens = g * (g + 1) + 1
    else:
        tokens = int(cfg.get("num_image_tokens", 576))
    try:
        heads = int(text["num_attention_heads"])
        dim = int(text["hidden_size"])
        vocab = int(text["vocab_size"])
        return Shape(
            spec,
            dim,
            int(text["num_hidden_layers"]),
            heads,
            int(text.get("num_key_value_heads") or heads),
            int(text.get("head_dim") or dim // heads),
            int(text["intermediate_size"]),
            vocab,
            vocab,
            tied=bool(text.get("tie_word_embeddings", False)),
            qk_norm=name in ("chameleon", "anole", "lumina2"),
            image_tokens=tokens,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _safetensors_config(path: Path):
    """Our decoder's config from a safetensors file's metadata (no tensor is read)."""
    from safetensors import safe_open

    from .transformer import TransformerConfig

    try:
        with safe_open(str(path), framework="pt") as f:
            return TransformerConfig(**json.loads(f.metadata()["config"]))
    except Exception:
        return None
