"""The Python entry point: ``generate(model, prompt, layout=..., method="sjd", ...)``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.checks import MAX_SEED, image_seeds, integer
from ..core.contract import ImageModel, check_layout_type, model_dtype
from ..core.errors import ConfigError
from ..core.layout import ImageLayout
from ..core.quantize import quantize_model, quantized_as
from ..core.sampling import SamplingConfig
from ..core.stats import DecodeStats
from ..parts.tree import MAX_NODES
from . import learned
from .auto import resolve
from .engine import PER_SEQUENCE, Determinism
from .jacobi import JacobiDecoder, Parts
from .methods import Method, get_method
from .methods import same_as_ar as with_invariant

# What ``method="auto"`` runs with ``same_as_ar``: its drafts argmax the same noise as ar's draws, so
# they pass the invariant verifier far more often than the other drafters' (docs/exactness.md,
# "Same seed, same image": on ``emoji``, scd-mc's drafts pass about half as often).
SAME_AS_AR_AUTO = "scd-gs"


@dataclass
class Generation:
    tokens: torch.Tensor  # [B, layout.length] generated tokens, structural ones included
    grid: torch.Tensor  # [B, rows, cols] image token grid
    stats: DecodeStats
    method: Method


def make_decoder(
    model: ImageModel,
    layout: ImageLayout,
    sampling: SamplingConfig,
    parts: Parts,
    timing: bool = False,
    latents: torch.Tensor | None = None,
    compile: bool | str = False,
    deterministic: Determinism = False,
    cuda_graphs: bool = True,
) -> JacobiDecoder:
    return JacobiDecoder(model, layout, sampling, parts, timing, latents, compile, deterministic, cuda_graphs)


def check_deterministic(value) -> None:
    if not (isinstance(value, bool) or value == PER_SEQUENCE):
        raise ConfigError(f"deterministic must be True, False or {PER_SEQUENCE!r}, got {value!r}")


def _ids(row, name: str) -> list:
    """A list of (not yet checked) ids from a list, tuple, tensor or array; never text."""
    if hasattr(row, "tolist"):
        row = row.tolist()
    if isinstance(row, (str, bytes)) or not isinstance(row, (list, tuple)) or not row:
        raise ConfigError(
            f"{name} must be a non-empty list of token ids (or a list of such lists), got "
            f"{row!r:.60}; text prompts go through a pipeline: "
            f"jacobigen.models.load_bundle(...).generate(texts)"
        )
    return list(row)


def _as_batch(prompt, name: str = "prompt") -> list[list[int]]:
    """One prompt (token ids) or a batch of them, as lists of ints."""
    prompt = _ids(prompt, name)
    nested = isinstance(prompt[0], (list, tuple)) or getattr(prompt[0], "ndim", 0) > 0
    rows = [_ids(r, name) for r in prompt] if nested else [prompt]
    return [[integer(f"{name} token id", t, 0) for t in row] for row in rows]


def _seeds(seed, n: int) -> list[int]:
    """One seed per sequence, each a 32-bit key of the counter-based generator (no silent wrap)."""
    if isinstance(seed, (list, tuple)) or getattr(seed, "ndim", 0) > 0:
        if not len(seed):
            raise ConfigError("seed is an empty list: give one seed per sequence, or one int")
        return [integer("seed", s, 0, MAX_SEED) for s in list(seed)]
    return image_seeds(seed, n, "sequence")


def prompt_rows(prompt, seed: int | list[int], uncond, guided: bool) -> tuple[list[list[int]], list[int]]:
    """The decoder's model rows (cond and uncond interleaved when guided) and one seed per
    sequence, by :func:`generate`'s rules for ``prompt``, ``seed`` and ``uncond``."""
    prompts = _as_batch(prompt)
    seeds = _seeds(seed, len(prompts))
    if len(prompts) == 1:
        prompts = prompts * len(seeds)
    if len(seeds) != len(prompts):
        raise ConfigError(f"{len(seeds)} seeds for {len(prompts)} prompts")
    if not guided:
        return prompts, seeds
    if uncond is None:
        raise ConfigError("cfg != 1 needs an unconditional prompt (uncond=...)")
    unconds = _as_batch(uncond, "uncond")
    if len(unconds) == 1:
        unconds = unconds * len(prompts)
    if len(unconds) != len(prompts):
        raise ConfigError(f"{len(unconds)} unconditional prompts for {len(prompts)} prompts")
    return [r for pair in zip(prompts, unconds, strict=True) for r in pair], seeds


def generate(
    model: ImageModel,
    prompt,
    *,
    layout: ImageLayout,
    method: str = "auto",
    window: int | None = None,
    seed: int | list[int] = 0,
    cfg: float = 1.0,
    uncond=None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    progress: bool = False,
    batch_size: int | None = None,
    timing: bool = False,
    latents: torch.Tensor | None = None,
    compile: bool | str = False,
    deterministic: Determinism | None = None,
    quantize: str | None = None,
    cuda_graphs: bool = True,
    same_as_ar: bool = False,
    **options,
) -> Generation:
    """Sample image token grids for one prompt (list of ids) or a batch of prompts.

    ``seed`` is one seed per sequence; an int gives sequence i the seed ``seed + i``, and a list of
    seeds with a single prompt samples that prompt once per seed. With ``cfg``
    other than 1, ``uncond`` is the unconditional prompt (one for all, or one per sequence).
    ``batch_size`` caps the sequences decoded together (default: all at once); when it is
    smaller, a finished sequence's row takes the next waiting one. The batch shares each forward;
    a sequence's distribution never depends on its batch (its draws are keyed by its own seed).
    ``deterministic=True`` also makes its tokens bit-identical alone and in any batch: the shared
    forward runs on row-invariant kernels (:mod:`jacobigen.core.invariant`; a matmul otherwise
    rounds by its row count, which moves a draw that lands within rounding of a boundary);
    ``"per-sequence"`` gives each sequence its own forward calls instead (the slow fallback).
    ``timing=True`` syncs an accelerator around each forward so that ``stats.forward_time`` is
    real (on a CPU it always is; on a GPU it is None otherwise, and the loop never waits).
    ``latents`` [image ids, d] place the image ids for GSD/LANTERN's neighbours (a VQ codebook;
    default: the model's output embedding rows). ``compile=True`` runs each decode step as one
    ``torch.compile`` graph (a backend name picks another backend); the distribution is the same
    (inductor's fused kernels may round a draw otherwise), the first image of each block shape pays
    the compilation (a compile that fails, whatever the error, warns once and decodes with the eager step).
    Without it, on CUDA each forward replays a CUDA graph captured once per block shape
    (:class:`jacobigen.decode.capture.Graphed`; ``stats.forward_path`` says whether it ran graphed); a
    capture or replay that fails warns once and runs the forward eagerly, and ``cuda_graphs=False``
    turns graphs off. ``quantize="int8"`` (or ``"int4"`` on CUDA) quantizes the model's linear weights
    in place first (torchao, weight-only; :mod:`jacobigen.core.quantize`): the target distribution is
    then the quantized model's, and the lossless methods sample it exactly. A model already quantized
    in that mode is used as it is. Extra keyword ``options`` go to the method's parts (see
    ``jacobigen methods``). ``method="auto"`` (the default, as the CLI's) runs the lossless method and
    window fastest on this machine by the model's step table, ``ar`` when nothing is clearly faster or
    the model has no table; ``window=None`` does the same for a named method (:mod:`jacobigen.decode.auto`).
    ``same_as_ar=True`` verifies with the invariant verifier instead of the method's rejection sampling:
    the same seed then commits exactly ``ar``'s tokens, at a price in forwards (docs/api.md). It turns
    ``deterministic`` on unless it is given (``deterministic=None``: ``same_as_ar``): outside it a block
    rounds otherwise than a single token, rarely in float32 and about once per image in bfloat16.
    """
    check_layout_type(layout)
    if quantize is not None:  # first: auto measures the model that will decode
        quantize_model(model, quantize)  # type: ignore[arg-type]  # a model that is no module: its ConfigError
    if not isinstance(same_as_ar, bool):
        raise ConfigError(f"same_as_ar must be True or False, got {same_as_ar!r}")
    if same_as_ar and method == "auto":
        method = SAME_AS_AR_AUTO  # the drafter that shares ar's noise; auto picks its window
    if method == "auto" or window is None:
        method, window = _auto(model, layout, prompt, uncond, method, window, options, temperature, top_k, top_p, cfg)
    if deterministic is None:
        deterministic = same_as_ar
    spec = with_invariant(get_method(method)) if same_as_ar else get_method(method)
    window = integer("window", window, 1)
    if window > layout.length + MAX_NODES:  # before a schedule sizes anything by it
        raise ConfigError(
            f"window {window} is longer than a block can use: the image has {layout.length} tokens "
            f"and a tree at most {MAX_NODES} nodes (window <= {layout.length + MAX_NODES})"
        )
    if batch_size is not None:
        batch_size = integer("batch_size", batch_size, 1)
    if not isinstance(compile, (bool, str)) or compile == "":
        raise ConfigError(f"compile must be True, False or a torch.compile backend name, got {compile!r}")
    sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p, cfg=cfg)
    rows, seeds = prompt_rows(prompt, seed, uncond, sampling.guided)
    if "batch_invariant" in options:
        raise ConfigError(
            "batch_invariant was replaced by deterministic: the batch now shares each forward by default; "
            "deterministic=True keeps tokens bit-identical across batches (docs/api.md)"
        )
    parts = spec.build(window, **options)
    for name, flag in (("progress", progress), ("timing", timing), ("cuda_graphs", cuda_graphs)):
        if not isinstance(flag, bool):
            raise ConfigError(f"{name} must be True or False, got {flag!r}")
    check_deterministic(deterministic)
    if latents is not None and not (isinstance(latents, torch.Tensor) and latents.ndim == 2):
        raise ConfigError(f"latents must be a 2-D tensor [image ids, d] (a VQ codebook), got {type(latents).__name__}")
    decoder = make_decoder(model, layout, sampling, parts, timing, latents, compile, deterministic, cuda_graphs)
    tokens, stats = decoder.run(rows, seeds, progress, batch_size)
    stats.lossless = spec.lossless
    stats.quantize = quantized_as(model)
    stats.dtype = model_dtype(model)
    if spec.lossless and not options:  # what the default learns from: forwards per image of a lossless method
        chosen = {"cfg": cfg, "temperature": temperature, "top_k": top_k, "top_p": top_p}
        learned.record(model, layout.length, chosen, f"{spec.name}@{spec.window or window}", stats.sequence_nfe)
    return Generation(tokens, layout.grid(tokens), stats, spec)


def _auto(model, layout, prompt, uncond, method, window, options, temperature, top_k, top_p, cfg) -> tuple[str, int]:
    """The (method, window) ``auto`` picks for the first sequence (:func:`jacobigen.decode.auto.resolve`,
    the command line's resolution too)."""
    if options.keys() - {"batch_invariant"}:  # that one has its own message below
        if method != "auto":  # a misspelt or mistyped option: the method's own message first
            get_method(method).build(window or layout.length, **options)
        raise ConfigError(
            f"method options {', '.join(sorted(options))} need a named method and window: auto weighs methods "
            "without options"
        )
    sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p, cfg=cfg)
    rows, _ = prompt_rows(prompt, 0, uncond, sampling.guided)
    group = 2 if sampling.guided else 1
    chosen = {"cfg": cfg, "temperature": temperature, "top_k": top_k, "top_p": top_p}
    choice = resolve(model, layout, rows[:group], chosen, method, window)
    return (method, get_method(method).window or 1) if choice is None else (choice.method, choice.window)
