"""A memory plan before any weight loads: weights, KV cache, decode buffers and activations.

``plan(shape, ...)`` needs a model's shape (:class:`Shape`: a named one of :mod:`.shapes`, or the one
the family's loader builds from a checkpoint's ``config.json``) and the decode's settings; it counts
the load peak (the weights plus the load's largest transient: :func:`load_transient`) and

- **weights**: every parameter at the model's dtype, the linear layers' at their quantization
  (int8: a byte per weight and 5 bytes per output row, torchao's Int8Tensor; int4: half a byte per
  weight and a bf16 scale and zero per 128 weights, torchao's tile-packed int4);
- **KV cache**: keys and values of every layer for each model row (a sequence holds two rows under
  CFG), over the slots the decoder allocates: prompt + image tokens + a window, rounded up to 64;
- **buffers**: the decoder's per-sequence float32 tables (targets, drafts' q, history: ``PER_SLOT``
  tables of window + 1 rows, :mod:`jacobigen.core.limits`), counted over the whole vocabulary: an
  upper bound, as the decoder's tables cover the layout's id span only (1,027 of the embedded
  model's 5,422 ids; :class:`jacobigen.core.sampling.TargetPipeline`);
- **activations**: the live tensors of one layer for the widest block the decoder runs (the prompt's
  prefill or a window): residual stream, q/k/v, the float mask, the MLP's, and off CUDA the attention
  scores over the whole cache (SDPA's math path); plus the logits in the model's dtype and in float32.
  An upper estimate of the peak, not a measurement.

and sets them against the memory free on the device (:func:`jacobigen.core.limits.free_memory`,
``JACOBIGEN_DEVICE_MEMORY`` to set it). Like the decoder, it plans the cache, buffers and
activations on at most ``LIMIT`` (90%) of what the weights leave free, and a default batch on ``BUDGET``
(half) of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.cache import cache_slots
from ..core.errors import ConfigError
from ..core.limits import BUDGET, LIMIT, MEMORY_ENV, PER_SLOT, free_memory, size

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
    qk_norm: str | None = None  # "chameleon": a weight and bias per head on q and k; "rms": one weight per head width
    extra_linear: tuple[tuple[int, int], ...] = ()  # other linear layers [out, in] (a family's image head)
    extra_params: int = 0  # other unquantized parameters (a family's image embedding, class table)
    image_tokens: int = 0  # the layout's tokens at the default size, structural ones included
    prompt_tokens: int = PROMPT_TOKENS
    cfg: bool = True  # guided by default (two model rows per sequence)
    decoder: int = 0  # bytes of the image decoder as loaded, when it is not at the model's dtype (MoVQGAN)
    image_decode: int = 0  # bytes one image's pixel decode holds (after the cache is freed; one image at a time)
    streamed: bool = False  # a family's streaming load (its transient planned); False: a small model read whole
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
        per_layer = {"chameleon": 2 * (self.n_heads + self.kv_heads) * self.head_dim, "rms": 2 * self.head_dim}
        qk = self.n_layers * per_layer[self.qk_norm] if self.qk_norm else 0
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
    return linear + shape.other_params() * dtype.itemsize + shape.decoder


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
    transient: int = 0  # what the streaming load holds besides the model at its peak (load_transient)

    @property
    def load_dtype(self) -> torch.dtype:
        """The dtype the weights load at, and the activations and cache run at (int4 runs in bf16)."""
        return torch.bfloat16 if self.quantize == "int4" else self.dtype

    @property
    def peak_loading(self) -> int:
        """Bytes while the weights load: the model as built plus the load's largest transient."""
        return self.weights + self.transient

    working = property(lambda self: self.cache + self.buffers + self.activations)
    # the tokens' decode, then the pixels' (the KV cache and the tables are freed between them)
    peak_working = property(lambda self: max(self.working, self.shape.image_decode))
    total = property(lambda self: self.weights + self.peak_working)

    def within(self, share: float) -> bool:
        """The load peak fits, and the decode's peak working set in ``share`` of what the weights leave."""
        if self.free is None:
            return True
        return max(self.total, self.peak_loading) <= self.free and self.peak_working <= share * (
            self.free - self.weights
        )

    fits = property(lambda self: self.within(LIMIT))

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
            f"  buffers      {size(self.buffers):>10}  ({PER_SLOT} float32 tables of {self.window + 1} x at most "
            f"{s.logits:,} per sequence)",
            f"  activations  {size(self.activations):>10}  (one layer and the logits for the widest block: "
            f"{self.block:,} tokens x {self.rows} rows; an upper estimate)",
            f"  image decode {size(s.image_decode):>10}  (one image's pixels at float32, after the cache is freed; "
            "measured per pixel on a CPU)",
        ]
        how = "one tensor at bf16 and its layer quantized" if self.quantize else "one tensor as stored"
        out.append(f"  load peak    {size(self.peak_loading):>10}  (the weights + {size(self.transient)}: {how})")
        if self.free is None:
            out.append(
                f"  total        {size(self.total):>10}  (free memory on {self.device} unknown: set "
                f"{MEMORY_ENV}, e.g. 24GiB, to plan against a budget)"
            )
        else:
            verdict = "fits" if self.fits else "does NOT fit"
            out.append(f"  total        {size(self.total):>10}  of {size(self.free)} free on {self.device}: {verdict}")
            if not self.fits and self.total <= self.free and self.peak_loading <= self.free:
                what = "cache, buffers and activations" if self.working >= s.image_decode else "the image decode"
                out.append(
                    f"  ({what} {size(self.peak_working)} > {LIMIT:.0%} of the "
                    f"{size(self.free - self.weights)} the weights leave: the decoder plans on at most that)"
                )
        return out

    def text(self) -> str:
        return "\n".join(self.lines())

    def refusal(self) -> str:
        """The one-line error for a plan that does not fit, with its figures and what to change."""
        if self.free is not None and self.peak_loading > self.free:
            return (
                f"{self.shape.name} does not fit on {self.device}: its load peaks at {size(self.peak_loading)} "
                f"(the weights and one tensor in flight), and {size(self.free)} is free; try "
                f"{'--quantize int8 or ' if self.quantize is None else ''}a machine with more memory"
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
        if self.shape.image_decode > self.working:  # the pixels' decode sets the peak: only the weights shrink it
            hints = hints[:1]
            working = f"the image decode {size(self.shape.image_decode)} (one image at float32)"
        else:
            working = (
                f"KV cache {size(self.cache)} + buffers {size(self.buffers)} + activations {size(self.activations)}"
            )
        return (
            f"{self.shape.name} does not fit on {self.device}: weights {size(self.weights)} ({weights}) + {working} = "
            f"{size(self.total)} for {self.batch} sequence(s) at window {self.window}, and {size(self.free or 0)} "
            f"is free (the decode plans on at most {LIMIT:.0%} of what the weights leave); try "
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
        load_transient(shape, act, quantize),
    )


STORED = 2  # bytes per weight in the files: the releases are bf16
QUANT_ROWS = 4096  # rows quantized at a time (jacobigen.core.quantize.ROWS)


def load_transient(shape: Shape, dtype: torch.dtype, quantize: str | None) -> int:
    """Bytes the streaming load (:mod:`jacobigen.models.families.stream`) holds besides the model it
    builds, at its largest: a fused weight's part read from the files; a tensor read at bf16 beside its
    cast copy; or, quantizing, a fused weight (q/k/v, gate/up) at full precision beside a chunk's float32
    temporaries (the other linear layers are quantized a chunk of rows at a time as they are read)."""
    fused = max(2 * shape.hidden, (shape.n_heads + 2 * shape.kv_heads) * shape.head_dim) * shape.dim
    if not shape.streamed:  # a small model read whole (the embedded ones): nothing planned
        return 0
    linears = shape.linears()
    widest = max(o * i for o, i, _ in linears)
    part = max(shape.hidden, shape.n_heads * shape.head_dim) * shape.dim * STORED
    cast = max(widest, shape.vocab * shape.dim) * STORED if dtype.itemsize != STORED else 0
    quant = fused * dtype.itemsize + 4 * QUANT_ROWS * max(shape.dim, shape.hidden) * 4 if quantize else 0
    return max(part, cast, quant)


def fitting(shape: Shape, batch: int | None, wanted: int, **kwargs) -> Plan:
    """The plan for ``batch`` sequences (None: as many of ``wanted`` as fit in ``BUDGET``, at least
    one), as the decoder chooses its batch."""
    if batch is not None:
        return plan(shape, batch=batch, **kwargs)
    best = plan(shape, batch=1, **kwargs)
    lo, hi = 1, wanted
    while lo < hi and best.within(BUDGET):  # the largest default batch
        mid = (lo + hi + 1) // 2
        trial = plan(shape, batch=mid, **kwargs)
        if trial.within(BUDGET):
            lo, best = mid, trial
        else:
            hi = mid - 1
    return best


def count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def table(shapes: list[Shape], **kwargs) -> str:
    """A markdown table: per shape, weights at bf16, int8 and int4, and the KV cache, buffers and
    activations of one decode and one image's pixel decode (``kwargs``: :func:`plan`'s), with bf16
    activations and cache."""
    head = (
        "| shape | parameters | tokens (prompt + image) | weights bf16 | int8 | int4 | KV cache | buffers | "
        "activations | image decode | total bf16 | int8 | int4 |\n" + "|---" * 13 + "|"
    )
    rows = [head]
    for shape in shapes:
        p = {q: plan(shape, dtype=torch.bfloat16, quantize=q, free=None, **kwargs) for q in (None, "int8", "int4")}
        b = p[None]
        rows.append(
            f"| `{shape.name}` | {count(shape.parameters)} | {b.prompt:,} + {shape.image_tokens:,} | "
            f"{size(b.weights)} | {size(p['int8'].weights)} | {size(p['int4'].weights)} | {size(b.cache)} | "
            f"{size(b.buffers)} | {size(b.activations)} | {size(shape.image_decode)} | {size(b.total)} | "
            f"{size(p['int8'].total)} | "
            f"{size(p['int4'].total)} |"
        )
    return "\n".join(rows)


def from_config(c, name: str, image_tokens: int, **kw) -> Shape:
    """The shape of our decoder (:class:`~jacobigen.models.transformer.TransformerConfig`)."""
    return Shape(name, c.dim, c.n_layers, c.n_heads, c.kv_heads, c.head_dim, c.hidden_dim, c.vocab_size, c.vocab_size,
                 tied=c.tie_embeddings, qk_norm=c.qk_norm, image_tokens=image_tokens, **kw)  # fmt: skip
