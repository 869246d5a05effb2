#!/usr/bin/env python
"""One prepared GPU measurement run (issue 38): the forward and the step at the limit, each part
with its own time budget.

a. ``bandwidth``: a device-to-device copy, the memory ceiling every figure is held against.
b. ``forward``: milliseconds per forward of our decoder (:class:`jacobigen.Transformer`) in the
   shape of Lumina-mGPT-7B (random weights, bf16, 2 rows: the CFG pair, 2,400 cached tokens) for
   blocks 1..64, four ways: eager; eager replayed as a CUDA graph (``decode.capture.Graphed``); the
   default path, the model as every decode calls it (``decode.capture.forward_of``: graphed on CUDA
   unless ``cuda_graphs=False``), with the path it took (``graphed``, or eager and why);
   ``torch.compile`` replayed as a CUDA graph. Beside each: the weight-read time at the datasheet
   bandwidth (4.8 TB/s) and the bytes the forward must read (weights + the cache), as GB/s.
c. ``plain``: the plain loop a user would write (``tools.plain_ar``), per token, on the eager model
   and on the graphed one (gpt-fast's treatment): the fair GPU baseline.
d. ``overhead``: every lossless preset on that model through ``generate`` as a user calls it (a 16x16
   image with EOL, Lumina's sampling): the default path, forwards graphed on CUDA (each decode
   captures its own block shape) and timed apart (``timing=True``), the path recorded per row; the
   forward per iteration is the default path's in a decode, and the bookkeeping is wall minus forward.
e. ``compiled``: a few presets with the whole step compiled under each of ``--step-backends`` and,
   on CUDA, replayed as one CUDA graph (``decode.replay``): the steady-state wall per iteration
   (the warm step and the recording left out) against the graphed forward of its block.
f. ``embedded``: ``jacobigen bench --compile`` on the embedded model (subprocess, with a timeout).
h. ``batch`` (issue 49): images/s of that model (16x16 image, CFG pair, forwards graphed) for
   ``--batch-methods`` at batch 1, 4 and 16, the batch's forward shared against deterministic
   (row-invariant kernels: :mod:`jacobigen.core.invariant`), each mode with its own graphs.
g. ``table``: Lumina-mGPT-7B at 768 px (2,357 tokens): seconds per image from the measured forward
   and bookkeeping, for AR and the papers' step compressions, beside the papers' published times.
i. ``lumina2`` (issue 52): Lumina-mGPT 2.0 at 768 px (96 x 97 + 1 = 9,313 image tokens): the graphed
   forward of the CFG pair at blocks 1 and 16 with its whole context cached, and seconds per image
   for AR and for step compressions 2-4 at window 16 (bookkeeping from ``overhead``), beside its
   README's 694 s (AR) and 324 s (its speculative Jacobi decoding, window 16) on an A100. The same
   7B stack (2.0 is Chameleon-shaped); 2.0's head over its 172k ids reads 1.4 GB more per forward
   than this 65,536-id one, about 0.3 ms at the datasheet bandwidth, added as ``head_ms``.

Each part runs under try/except; ``measure.json`` and ``measure.md`` are rewritten after every part,
so a failure or a kill keeps the figures already taken. ``--tiny`` runs the same code on a 2-layer
model on the CPU in seconds (tests/tools/test_gpu_script.py). The command to run on a lent GPU is in
benchmarks/gpu/README.md; it needs no package beyond torch (no transformers).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
try:
    import jacobigen
except ImportError:  # not installed (e.g. a bare GPU machine): use the checkout's sources
    sys.path.insert(0, str(REPO / "src"))
    import jacobigen

import torch

from jacobigen.core.masks import block_mask, causal
from jacobigen.decode import replay
from jacobigen.decode.capture import Graphed, emulated, forward_of
from jacobigen.decode.costs import block_size
from jacobigen.decode.methods import parse_variant, split_variants
from jacobigen.models.families.chameleon import DEFAULTS, lumina_7b_config
from jacobigen.models.transformer import Transformer, TransformerConfig

DATASHEET_TBPS = 4.8  # H200 HBM3e
LUMINA_768 = 2357  # 48 x 48 cells + 48 EOL + end of image
LUMINA2_768 = 96 * 97 + 1  # 96 rows of 96 codes, each ended by a separator, then the end of the image
LUMINA2_PUBLISHED = {"ar": 694.0, "jacobi-16": 324.0}  # its README, one A100, 768 px, CFG 4, top-k 4096
LUMINA2_HEAD_BYTES = (172_032 - 65_536) * 4096 * 2  # 2.0's larger head over this one, bf16
PAPERS = {  # Lumina-mGPT 768 px, step compression and seconds per image as each paper reports them
    "ar": (1.0, 197.0),
    "sjd": (2.2, None),
    "scd": (4.2, None),
    "sjd-pac": (4.5, None),
}
TINY_SHAPE = TransformerConfig(vocab_size=160, dim=64, n_layers=2, n_heads=4, ffn_dim=128, qk_norm="chameleon")
FULL = dict(
    sizes=[1, 16, 32, 64],
    compiled_sizes=[1, 64],
    context=2400,
    reps=10,
    warmup=3,
    grid=16,
    budget_forward=200.0,
    budget_plain=60.0,
    plain_compiled=False,  # the forward part measures the compiled forward; compiling here costs minutes
    budget_overhead=150.0,
    budget_compiled=150.0,
    embedded_timeout=150.0,
    step_backends="eager,inductor",
    batch_sizes=[1, 4, 16],
    budget_batch=150.0,
    lumina2_context=LUMINA2_768 + 64,  # the image and a short prompt
    lumina2_sizes=[1, 16],
)
TINY = dict(
    sizes=[1, 4, 8],
    compiled_sizes=[1],
    context=64,
    reps=2,
    warmup=1,
    grid=4,
    budget_forward=60.0,
    budget_plain=30.0,
    plain_compiled=True,
    budget_overhead=60.0,
    budget_compiled=60.0,
    embedded_timeout=240.0,
    step_backends="eager",
    batch_sizes=[1, 2],
    budget_batch=60.0,
    lumina2_context=96,
    lumina2_sizes=[1, 4],
)
# the report's parts, in the order they run and are printed
PARTS = ("model", "bandwidth", "forward", "plain", "overhead", "batch", "lumina2", "compiled", "embedded", "table")
PRESETS = "ar,sjd,scd-mc,scd-gs,sjd-pac,sjd-vp,scd-mc+pac+vp"
COMPILED_PRESETS = "ar,scd-mc,sjd-pac"


# --- helpers --------------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def error_text(e: BaseException) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))[-3000:]


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def build_model(cfg: TransformerConfig, device: torch.device, seed: int = 0) -> tuple[Transformer, dict]:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    with torch.device(device):
        model = Transformer(cfg)
    model = model.to(dtype).eval()
    sync(device)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    info = {
        "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        "params": sum(p.numel() for p in model.parameters()),
        "weight_bytes": weight_bytes,
        "dtype": str(dtype).replace("torch.", ""),
        "build_seconds": time.perf_counter() - t0,
    }
    return model, info


def timed(fn, device, warmup: int, reps: int) -> list[float]:
    out = []
    for rep in range(warmup + reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        if rep >= warmup:
            out.append(time.perf_counter() - t0)
    return out


# --- a: bandwidth ---------------------------------------------------------------------------------


def bandwidth(device, tiny: bool, result):
    n = (1 << 20) if tiny else (1 << 30)  # bf16 elements: 2 GB each way on the GPU
    a = torch.empty(n, dtype=torch.bfloat16, device=device)
    b = torch.empty_like(a)
    times = timed(lambda: b.copy_(a), device, 2, 5)
    med = statistics.median(times)
    result.update(bytes_moved=2 * a.numel() * 2, median_s=med, gbps=2 * a.numel() * 2 / med / 1e9)
    a = b = None  # noqa: F841 - freed before the next part
    free_memory(device)


# --- b: the forward -------------------------------------------------------------------------------


def forward_curve(model, info, device, args, result):
    """Each variant over the same cache (2 rows, ``context`` entries, capacity context + 64): the
    block's K/V land after the cached entries and are never committed, so every rep sees the same."""
    rows, context = 2, args.context
    capacity = context + max(args.sizes)
    cache = model.new_cache(rows, capacity)
    cache.lengths += context
    cfg = model.config
    kv_bytes = (
        2
        * rows
        * cfg.n_layers
        * cfg.kv_heads
        * capacity
        * cfg.head_dim
        * info["weight_bytes"]
        // max(info["params"], 1)
    )
    read = info["weight_bytes"] + kv_bytes
    result.update(
        rows=rows,
        context=context,
        capacity=capacity,
        reps=args.reps,
        weight_bytes=info["weight_bytes"],
        kv_bytes=kv_bytes,
        weight_read_ms=1e3 * info["weight_bytes"] / (DATASHEET_TBPS * 1e12),
        read_ms=1e3 * read / (DATASHEET_TBPS * 1e12),
        points=[],
        skipped=[],
    )
    variants = [("eager", model, args.sizes), ("graphed", Graphed(model), args.sizes)]
    variants.append(("default", forward_of(model, device, True), args.sizes))  # what generate calls
    variants.append(("compiled+graphed", Graphed(model, compile=args.backend), args.compiled_sizes))
    t_part = time.perf_counter()
    g = torch.Generator().manual_seed(0)
    for name, fwd, sizes in variants:
        for size in sizes:
            if time.perf_counter() - t_part > args.budget_forward:
                result["skipped"].append({"variant": name, "block": size})
                continue
            tokens = torch.randint(0, cfg.vocab_size, (rows, size), generator=g).to(device)
            positions = torch.arange(context, context + size, device=device).expand(rows, size)
            mask = block_mask(cache.lengths, capacity, causal(size, device))
            t0 = time.perf_counter()
            with torch.inference_mode():
                times = timed(lambda f=fwd, t=tokens, p=positions, m=mask: f(t, p, m, cache), device, args.warmup, 1)
                first = time.perf_counter() - t0  # compile and capture included
                times = timed(lambda f=fwd, t=tokens, p=positions, m=mask: f(t, p, m, cache), device, 1, args.reps)
            med = statistics.median(times)
            result["points"].append(
                {
                    "variant": name,
                    "block": size,
                    "median_ms": 1e3 * med,
                    "min_ms": 1e3 * min(times),
                    "setup_s": first,
                    "path": path_of(fwd),
                    "vs_weight_read": 1e3 * med / result["weight_read_ms"],
                    "gbps": read / med / 1e9,
                }
            )
            write_partial(result)
    for p in result["points"]:
        one = next((q for q in result["points"] if q["variant"] == p["variant"] and q["block"] == 1), None)
        p["vs_block1"] = p["median_ms"] / one["median_ms"] if one else None
    result["status"] = "partial" if result["skipped"] else "ok"
    if device.type == "cuda":
        result["peak_memory_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    cache = None  # noqa: F841
    free_memory(device)


def path_of(model) -> str:
    """How a variant's forwards ran: ``graphed``, ``eager``, or eager because its graphs failed."""
    return getattr(model, "status", "eager")


def best_forward_ms(report: dict, block: int) -> float | None:
    """The fastest measured forward of a block (interpolated between measured blocks)."""
    pts = [p for p in report.get("forward", {}).get("points", []) if p["variant"] != "eager"]
    by_block: dict[int, float] = {}
    for p in pts:
        by_block[p["block"]] = min(by_block.get(p["block"], float("inf")), p["median_ms"])
    if not by_block:
        return None
    xs = sorted(by_block)
    if block <= xs[0]:
        return by_block[xs[0]]
    for a, b in zip(xs, xs[1:], strict=False):
        if block <= b:
            return by_block[a] + (by_block[b] - by_block[a]) * (block - a) / (b - a)
    return by_block[xs[-1]]


# --- c: the plain loop ----------------------------------------------------------------------------


def image_setup(model, grid: int, seed: int = 0):
    """A Lumina-like image layout over our random model's ids, and a prompt/unconditional pair."""
    from jacobigen import ImageLayout

    v = model.vocab_size
    lo, hi = 4, max(8, v - 64)
    layout = ImageLayout(grid, grid, (lo, hi), eol_id=hi, end_id=hi + 1)
    header = [hi + 2, hi + 3, hi + 3]
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(hi + 4, v, (16,), generator=g).tolist()
    return layout, text + header, header


def plain(model, device, args, result):
    from jacobigen.tools.plain_ar import plain_ar

    layout, prompt, uncond = image_setup(model, args.grid)
    sampling = dict(DEFAULTS)
    result.update(tokens=layout.length, sampling=sampling, runs=[])
    t_part = time.perf_counter()
    variants = {"eager": model, "graphed": Graphed(model)}
    if args.plain_compiled:
        variants["compiled+graphed"] = Graphed(model, args.backend)
    for name, fwd in variants.items():
        if time.perf_counter() - t_part > args.budget_plain:
            result.setdefault("skipped", []).append(name)
            continue
        t0 = time.perf_counter()
        plain_ar(fwd, layout, prompt, uncond, **sampling)  # compiles and captures
        setup = time.perf_counter() - t0
        times = timed(lambda f=fwd: plain_ar(f, layout, prompt, uncond, **sampling), device, 0, 1)
        med = statistics.median(times)
        result["runs"].append(
            {
                "variant": name,
                "seconds": med,
                "ms_per_token": 1e3 * med / layout.length,
                "setup_s": setup,
                "path": path_of(fwd),
            }
        )
        write_partial(result)
    result["status"] = "partial" if result.get("skipped") else "ok"


# --- d: the step's bookkeeping --------------------------------------------------------------------


def run_preset(model, name, window, layout, prompt, uncond, compile=False, timing=True):
    from jacobigen import generate

    v = parse_variant(name)
    gen = generate(
        model,
        prompt,
        layout=layout,
        method=v.method.name,
        window=v.window or window,
        uncond=uncond,
        timing=timing and not compile,
        compile=compile,
        **v.options,
        **DEFAULTS,
    )
    return gen.stats


def overhead(model, device, args, result, report):
    layout, prompt, uncond = image_setup(model, args.grid)
    result.update(layout={"rows": args.grid, "cols": args.grid, "length": layout.length}, runs=[], skipped=[])
    t_part = time.perf_counter()
    run_preset(model, "sjd", max(args.windows), layout, prompt, uncond)  # kernels and allocator warmed
    result["warmup_seconds"] = time.perf_counter() - t_part
    runs = [(m, w) for m in split_variants(args.methods) for w in args.windows]
    for name, window in dict.fromkeys((m, parse_variant(m).window or w) for m, w in runs):
        if time.perf_counter() - t_part > args.budget_overhead:
            result["skipped"].append({"method": name, "window": window})
            continue
        run_preset(model, name, window, layout, prompt, uncond)  # this method's first run warms its own
        s = run_preset(model, name, window, layout, prompt, uncond)
        iters = max(len(s.committed), 1)
        over = s.wall_time - s.forward_time
        result["runs"].append(
            {
                "method": name,
                "window": window,
                "step": "eager, default forward",
                "block": block_size(parse_variant(name).build(window), layout),
                "nfe": s.nfe,
                "iterations": iters,
                "wall_s": s.wall_time,
                "forward_ms_per_iter": 1e3 * s.forward_time / iters,
                "bookkeeping_ms_per_iter": 1e3 * over / iters,
                "tokens_per_forward": s.mean_accepted,
                "path": s.forward_path,
            }
        )
        write_partial(result)
    result["status"] = "partial" if result["skipped"] else "ok"


def compiled_overhead(model, device, args, result, report):
    """The whole step compiled by each of ``--step-backends``; on CUDA it is then replayed as a
    CUDA graph (``jacobigen.decode.replay``). Per iteration: wall, and the steady state (wall
    less the warm step and the recording, over the other iterations) against the graphed forward
    of its block: the bookkeeping the step leaves."""
    layout, prompt, uncond = image_setup(model, args.grid)
    result.update(runs=[], skipped=[])
    t_part = time.perf_counter()
    captured = device.type == "cuda" or args.emulate_graphs
    for name in split_variants(args.compiled_methods):
        for backend in args.step_backends.split(","):
            how = True if backend == "inductor" else backend
            window = parse_variant(name).window or max(args.windows)
            if time.perf_counter() - t_part > args.budget_compiled:
                result["skipped"].append({"method": name, "window": window, "backend": backend})
                continue
            try:
                t0 = time.perf_counter()
                run_preset(model, name, window, layout, prompt, uncond, compile=how)
                setup = time.perf_counter() - t0
                s = run_preset(model, name, window, layout, prompt, uncond, compile=how)
            except Exception as e:  # one backend failing leaves the others' rows
                result.setdefault("errors", {})[f"{name} {backend}"] = error_text(e)[-600:]
                free_memory(device)
                continue
            iters = max(len(s.committed), 1)
            block = block_size(parse_variant(name).build(window), layout)
            fwd = best_forward_ms(report, block)
            steady = 1e3 * (s.wall_time - s.capture_time) / max(iters - 2, 1) if captured else None
            wall_ms = 1e3 * s.wall_time / iters
            per_iter = steady if captured else wall_ms
            result["runs"].append(
                {
                    "method": name,
                    "window": window,
                    "step": f"{'captured' if captured else 'compiled'} ({backend})",
                    "backend": backend,
                    "block": block,
                    "nfe": s.nfe,
                    "iterations": iters,
                    "wall_s": s.wall_time,
                    "wall_ms_per_iter": wall_ms,
                    "capture_s": s.capture_time,
                    "steady_ms_per_iter": steady,
                    "graphed_forward_ms": fwd,
                    "bookkeeping_ms_per_iter": None if fwd is None else per_iter - fwd,
                    "compile_s": setup,
                }
            )
            write_partial(result)
    result["status"] = "partial" if result["skipped"] or result.get("errors") else "ok"


# --- e: the embedded model ------------------------------------------------------------------------


def embedded_bench(out: Path, args, result):
    dest = out / "embedded"
    backend = args.embedded_backend or args.backend
    cmd = [
        sys.executable,
        "-c",
        "import sys; from jacobigen.cli import main; sys.exit(main())",
        "bench",
        "--model",
        "default",
        "--methods",
        args.embedded_methods,
        "--window",
        args.embedded_windows,
        "--prompts",
        str(args.embedded_prompts),
        "--device",
        args.device,
        "--compile",
        *([] if backend is True else ["--compile-backend", backend]),
        "--out",
        str(dest),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    result.update(command=["jacobigen", *cmd[3:]], timeout_s=args.embedded_timeout)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.embedded_timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        tail = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        result.update(status="timeout", seconds=time.perf_counter() - t0, output_tail=tail[-2000:])
        return
    result.update(
        returncode=proc.returncode, seconds=time.perf_counter() - t0, output_tail=(proc.stdout + proc.stderr)[-2000:]
    )
    for extra in {*dest.rglob("*.png"), *dest.glob("*/*")}:  # the lent machine returns at most 8 files:
        extra.unlink()  # keep the top bench.json (every setting) and bench.md
    if proc.returncode != 0:
        raise RuntimeError(f"jacobigen bench exited with {proc.returncode}:\n{(proc.stdout + proc.stderr)[-1500:]}")
    bench = json.loads((dest / "bench.json").read_text())
    keys = ("method", "window", "lossless", "nfe", "wall", "step_compression", "latency_speedup")
    keys += ("graph_breaks", "recompiles", "tokens_equal_eager")
    settings = bench.get("settings", {"": bench})  # eager and compiled, per thread count
    result["rows"] = [{"setting": n, **{k: r.get(k) for k in keys}} for n, st in settings.items() for r in st["rows"]]
    result["baseline"] = {n: st.get("baseline") for n, st in settings.items()}


# --- f: Lumina-mGPT-7B at 768 px ------------------------------------------------------------------


def projection(report: dict, result):
    """Seconds per image = forwards (2,357 / step compression) x (forward of the block + bookkeeping)."""
    runs = report.get("overhead", {}).get("runs", [])
    compiled = report.get("compiled", {}).get("runs", [])
    keep = {"ar": "ar", "sjd": "sjd", "scd": "scd-mc", "sjd-pac": "sjd-pac"}
    result["rows"] = []
    for paper, (compression, published) in PAPERS.items():
        method = keep[paper]
        ours = [r for r in runs if r["method"] == method]
        mine = min(ours, key=lambda r: r["window"], default=None) if paper == "ar" else None
        mine = mine or next((r for r in ours if r["window"] == 32), None) or (ours[0] if ours else None)
        block = 1 if paper == "ar" else 32
        fwd = best_forward_ms(report, block)
        book = mine["bookkeeping_ms_per_iter"] if mine else None
        comp = [r["bookkeeping_ms_per_iter"] for r in compiled if r["method"] == method]
        book_c = min((b for b in comp if b is not None), default=None)
        forwards = LUMINA_768 / compression
        row = {"method": paper, "step_compression": compression, "forwards": forwards, "forward_ms": fwd}
        row["published_s"] = published
        if fwd is not None and book is not None:
            row["seconds_eager_step"] = forwards * (fwd + book) / 1e3
        if fwd is not None and book_c is not None:
            row["seconds_compiled_step"] = forwards * (fwd + max(book_c, 0.0)) / 1e3
        if fwd is not None:
            row["seconds_forward_only"] = forwards * fwd / 1e3
        result["rows"].append(row)


# --- i: Lumina-mGPT 2.0 at 768 px ----------------------------------------------------------------


def lumina2(model, device, args, result, report):
    """The graphed forward of the CFG pair over Lumina-mGPT 2.0's 768-px context, and what it makes
    of an image: AR's 9,313 forwards, and a window-16 method's at step compressions 2, 3 and 4."""
    rows, context = 2, args.lumina2_context
    capacity = context + max(args.lumina2_sizes)
    cache = model.new_cache(rows, capacity)
    cache.lengths += context
    graphed = Graphed(model)
    head_ms = 1e3 * LUMINA2_HEAD_BYTES / (DATASHEET_TBPS * 1e12) if not args.tiny else 0.0
    result.update(context=context, image_tokens=LUMINA2_768, head_ms=head_ms, points=[], rows=[])
    g = torch.Generator().manual_seed(0)
    for size in args.lumina2_sizes:
        tokens = torch.randint(0, model.config.vocab_size, (rows, size), generator=g).to(device)
        positions = torch.arange(context, context + size, device=device).expand(rows, size)
        mask = block_mask(cache.lengths, capacity, causal(size, device))
        with torch.inference_mode():
            run = lambda t=tokens, p=positions, m=mask: graphed(t, p, m, cache)  # noqa: E731
            times = timed(run, device, max(args.warmup, 2), args.reps)  # a shape is captured at its second call
        result["points"].append(
            {"block": size, "median_ms": 1e3 * statistics.median(times) + head_ms, "path": path_of(graphed)}
        )
    fwd = {p["block"]: p["median_ms"] for p in result["points"]}
    one, wide = fwd[min(fwd)], fwd[max(fwd)]
    window = max(fwd)
    books = [
        r["bookkeeping_ms_per_iter"] for r in report.get("overhead", {}).get("runs", []) if r["method"] == "scd-mc"
    ]
    book = min(books, default=0.0)
    result["rows"].append({"method": "ar", "step_compression": 1.0, "seconds": LUMINA2_768 * one / 1e3})
    for c in (2.0, 3.0, 4.0):
        result["rows"].append(
            {"method": f"window {window}", "step_compression": c, "seconds": LUMINA2_768 / c * (wide + book) / 1e3}
        )
    result["published"] = LUMINA2_PUBLISHED
    cache = None  # noqa: F841
    free_memory(device)


# --- h: batches -----------------------------------------------------------------------------------


def batches(model, device, args, result):
    """Images/s per (method, mode, batch size); a fresh ``Graphed`` per mode, since a graph keeps
    the kernels it was captured with. The first run of each setting captures its graphs, the
    second is timed."""
    from jacobigen import generate

    layout, prompt, uncond = image_setup(model, args.grid)
    result.update(tokens=layout.length, runs=[], skipped=[])
    t_part = time.perf_counter()
    for mode, deterministic in (("shared", False), ("deterministic", True)):
        graphed = Graphed(model)
        for name in split_variants(args.batch_methods):
            v = parse_variant(name)
            for b in args.batch_sizes:
                if time.perf_counter() - t_part > args.budget_batch:
                    result["skipped"].append({"method": name, "mode": mode, "batch": b})
                    continue

                def run(v=v, b=b, deterministic=deterministic, graphed=graphed):
                    return generate(
                        graphed,
                        [prompt] * b,
                        layout=layout,
                        method=v.method.name,
                        window=v.window or max(args.windows),
                        uncond=uncond,
                        seed=list(range(b)),
                        deterministic=deterministic,
                        **v.options,
                        **DEFAULTS,
                    ).stats

                run()
                sync(device)
                t0 = time.perf_counter()
                s = run()
                sync(device)
                wall = time.perf_counter() - t0
                iters = max(len(s.committed), 1)
                result["runs"].append(
                    {
                        "method": name,
                        "mode": mode,
                        "batch": b,
                        "wall_s": wall,
                        "images_per_second": b / wall,
                        "iterations": iters,
                        "ms_per_iteration": 1e3 * wall / iters,
                        "path": s.forward_path,
                    }
                )
                write_partial(result)
    result["status"] = "partial" if result["skipped"] else "ok"


# --- report ---------------------------------------------------------------------------------------

_REPORT: dict = {}
_OUT: list[Path] = []


def write_partial(_result=None) -> None:
    if _OUT:
        write(_REPORT, _OUT[0])


def fmt(x, spec=".3g"):
    return "-" if x is None else format(x, spec)


def markdown(report: dict) -> str:
    m = report["meta"]
    lines = [
        f"# GPU measurements ({'tiny' if m['tiny'] else 'Lumina-mGPT-7B shape'}, {m['device_name']})",
        "",
        f"torch {m['torch']}, jacobigen {m['jacobigen']} ({m['git']}), {m['started']}, "
        f"{fmt(m.get('total_seconds'), '.0f')} s in all.",
        "",
    ]
    mod = report.get("model", {})
    if mod.get("params"):
        lines += [
            f"Model: our decoder, random weights, {mod['params'] / 1e6:,.1f} M parameters "
            f"({mod['weight_bytes'] / 1e9:.2f} GB), {mod['dtype']}, built in {mod['build_seconds']:.1f} s.",
            "",
        ]
    for key in PARTS:
        part = report.get(key, {})
        if part.get("status") in ("error", "timeout"):
            lines += [f"**{key}: {part['status']}**", "", "```", (part.get("error") or "").strip()[-1200:], "```", ""]
    bw = report.get("bandwidth", {})
    if bw.get("gbps"):
        lines += [f"Device copy: {bw['gbps']:.0f} GB/s (read + write); datasheet {DATASHEET_TBPS} TB/s.", ""]
    f = report.get("forward", {})
    if f.get("points"):
        lines += [
            f"## Forward ({f['rows']} rows, {f['context']} cached tokens, capacity {f['capacity']}, median of "
            f"{f['reps']}; weights {f['weight_bytes'] / 1e9:.2f} GB read in {f['weight_read_ms']:.2f} ms, "
            f"weights + cache in {f['read_ms']:.2f} ms at {DATASHEET_TBPS} TB/s)",
            "",
            "| variant | block | ms / forward | min ms | x weight read | GB/s | vs block 1 | setup s | ran |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {p['variant']} | {p['block']} | {p['median_ms']:.2f} | {p['min_ms']:.2f} | "
            f"{p['vs_weight_read']:.2f} | {p['gbps']:.0f} | {fmt(p.get('vs_block1'), '.2f')} | {p['setup_s']:.1f} | "
            f"{p.get('path', '-')} |"
            for p in f["points"]
        ]
        lines += [""]
    pl = report.get("plain", {})
    if pl.get("runs"):
        lines += [f"## Plain loop ({pl['tokens']} tokens, CFG pair)", "", "| variant | s / image | ms / token |"]
        lines += ["|---|---|---|"] + [
            f"| {r['variant']} | {r['seconds']:.2f} | {r['ms_per_token']:.2f} |" for r in pl["runs"]
        ]
        lines += [""]
    o = report.get("overhead", {})
    c = report.get("compiled", {})
    if o.get("runs") or c.get("runs"):
        lines += [
            "## Bookkeeping per iteration (wall minus forward)",
            "",
            "| method | window | step | block | nfe | wall s | forward ms/iter | bookkeeping ms/iter |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in o.get("runs", []) + c.get("runs", []):
            fwd = r.get("forward_ms_per_iter", r.get("graphed_forward_ms"))
            lines.append(
                f"| {r['method']} | {r['window']} | {r['step']} | {r['block']} | {r['nfe']} | {r['wall_s']:.2f} | "
                f"{fmt(fwd, '.2f')} | {fmt(r['bookkeeping_ms_per_iter'], '.2f')} |"
            )
        for s in o.get("skipped", []) + c.get("skipped", []):
            lines.append(f"\nskipped (budget): {s['method']} window {s['window']}")
        lines += [""]
    e = report.get("embedded", {})
    if e.get("rows"):
        lines += [
            "## Embedded model, compiled step (`" + " ".join(e["command"]) + "`)",
            "",
            "| setting | method | window | nfe | wall s | step compression | latency speedup | graph breaks "
            "| recompiles | tokens = eager |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.get('setting', '')} | {r['method']} | {r['window']} | {fmt(r['nfe'], '.1f')} | "
            f"{fmt(r['wall'], '.3f')} | "
            f"{fmt(r['step_compression'], '.2f')} | {fmt(r['latency_speedup'], '.2f')} | "
            f"{fmt(r.get('graph_breaks'), 'd')} | {fmt(r.get('recompiles'), 'd')} | {r.get('tokens_equal_eager')} |"
            for r in e["rows"]
        ]
        lines += [""]
    bt = report.get("batch", {})
    if bt.get("runs"):
        alone = {(r["method"], r["mode"]): r["images_per_second"] for r in bt["runs"] if r["batch"] == 1}
        shared = {(r["method"], r["batch"]): r["images_per_second"] for r in bt["runs"] if r["mode"] == "shared"}
        lines += [
            f"## Batches ({bt['tokens']} tokens per image, CFG pair, forwards graphed)",
            "",
            "| method | forward | batch | images/s | vs batch 1 | vs shared | ms / iteration |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['method']} | {r['mode']} | {r['batch']} | {r['images_per_second']:.3f} | "
            f"{fmt(_over(r['images_per_second'], alone.get((r['method'], r['mode']))), '.2f')} | "
            f"{fmt(_over(r['images_per_second'], shared.get((r['method'], r['batch']))), '.2f')} | "
            f"{r['ms_per_iteration']:.2f} |"
            for r in bt["runs"]
        ]
        for sk in bt.get("skipped", []):
            lines.append(f"\nskipped (budget): {sk['method']} {sk['mode']} batch {sk['batch']}")
        lines += [""]
    l2 = report.get("lumina2", {})
    if l2.get("rows"):
        pub = l2["published"]
        lines += [
            f"## Lumina-mGPT 2.0, 768 px ({l2['image_tokens']:,} tokens; published on an A100: {pub['ar']:.0f} s AR, "
            f"{pub['jacobi-16']:.0f} s with its Jacobi decoding at window 16)",
            "",
            "forward of the CFG pair at its full context (ms, graphed, with 2.0's larger head added: "
            f"{l2['head_ms']:.2f} ms): " + ", ".join(f"block {p['block']}: {p['median_ms']:.2f}" for p in l2["points"]),
            "",
            "| method | step compression | seconds per image |",
            "|---|---|---|",
        ]
        lines += [f"| {r['method']} | {r['step_compression']:.1f} | {r['seconds']:.1f} |" for r in l2["rows"]]
        lines += [""]
    t = report.get("table", {})
    if t.get("rows"):
        lines += [
            "## Lumina-mGPT-7B, 768 px (2,357 tokens): seconds per image",
            "",
            "| method | step compression | forwards | forward ms | eager step s | compiled step s | forward only s "
            "| published s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['method']} | {r['step_compression']} | {r['forwards']:.0f} | {fmt(r['forward_ms'], '.2f')} | "
            f"{fmt(r.get('seconds_eager_step'), '.1f')} | {fmt(r.get('seconds_compiled_step'), '.1f')} | "
            f"{fmt(r.get('seconds_forward_only'), '.1f')} | {fmt(r['published_s'], '.0f')} |"
            for r in t["rows"]
        ]
        lines += [""]
    return "\n".join(lines)


def _over(x: float, base: float | None) -> float | None:
    return x / base if base else None


def write(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "measure.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "measure.md").write_text(markdown(report))


# --- main -----------------------------------------------------------------------------------------


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def parse(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT, else benchmarks/gpu/out)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--tiny", action="store_true", help="a 2-layer model, small cache and image (CI, CPU)")
    p.add_argument("--sizes", type=ints, default=None, help="block sizes of the forward curve")
    p.add_argument("--compiled-sizes", type=ints, default=None, help="block sizes of the compiled forward")
    p.add_argument("--context", type=int, default=None, help="cached tokens per row")
    p.add_argument("--reps", type=int, default=None, help="timed forwards per block size (median)")
    p.add_argument("--grid", type=int, default=None, help="image side in tokens for the plain loop and presets")
    p.add_argument("--windows", type=ints, default=[32])
    p.add_argument("--methods", default=PRESETS, help="presets for the bookkeeping part")
    p.add_argument("--compiled-methods", default=COMPILED_PRESETS, help="presets run with the step compiled")
    p.add_argument("--batch-methods", default="ar,scd-mc", help="presets of the batch part")
    p.add_argument("--batch-sizes", type=ints, default=None, help="batch sizes of the batch part")
    for part in ("forward", "plain", "overhead", "batch", "compiled"):
        p.add_argument(f"--budget-{part}", type=float, default=None, help=f"seconds for the {part} part")
        p.add_argument(f"--skip-{part}", action="store_true")
    p.add_argument("--backend", default=True, help="torch.compile backend (default inductor; eager: trace only)")
    p.add_argument("--plain-compiled", action="store_true", default=None, help="also the compiled+graphed plain loop")
    p.add_argument("--embedded-backend", default=None, help="the embedded bench's backend")
    p.add_argument("--step-backends", default=None, help="backends the compiled part runs each preset under")
    p.add_argument(
        "--emulate-graphs",
        action="store_true",
        help="record and replay graphs on the CPU through OpReplay, CUDA graphs' stand-in: the graphed forwards "
        "and the compiled part's steps (tests)",
    )
    p.add_argument("--skip-embedded", action="store_true")
    p.add_argument("--skip-lumina2", action="store_true")
    p.add_argument("--embedded-timeout", type=float, default=None)
    p.add_argument("--embedded-methods", default="ar,sjd,scd-mc,scd-gs,sjd-pac,pjd")
    p.add_argument("--embedded-windows", default="32")
    p.add_argument("--embedded-prompts", type=int, default=2)
    args = p.parse_args(argv)
    for k, v in (TINY if args.tiny else FULL).items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    args.out = args.out or Path(os.environ.get("OUT") or REPO / "benchmarks" / "gpu" / "out")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return args


def git_describe() -> str:
    try:
        run = dict(cwd=REPO, capture_output=True, text=True, timeout=10)
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], **run).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], **run).stdout.strip()
        return (rev + ("+dirty" if dirty else "")) or "unknown"
    except Exception:
        return "unknown"


def main(argv=None) -> dict:
    args = parse(argv)
    with emulated("cpu") if args.emulate_graphs else contextlib.nullcontext():
        return measure(args, sys.argv[1:] if argv is None else list(argv))


def measure(args, argv: list[str]) -> dict:
    t_start = time.perf_counter()
    device = torch.device(args.device)
    out = Path(args.out)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU x{os.cpu_count()}"
    report = _REPORT
    report.clear()
    _OUT[:] = [out]
    report["meta"] = {
        "tiny": args.tiny,
        "device": str(device),
        "device_name": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "jacobigen": jacobigen.__version__,
        "git": git_describe(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "threads": torch.get_num_threads(),
        "argv": argv,
    }
    for key in PARTS:
        report[key] = {"status": "pending"}
    write(report, out)

    def part(key, fn, skip=False):
        res = report[key]
        if skip:
            res["status"] = "skipped"
            return
        t0 = time.perf_counter()
        try:
            fn(res)
            if res.get("status") in (None, "pending"):
                res["status"] = "ok"
        except Exception as e:  # record and go on: the other parts' figures must survive
            res.update(status="error", error=error_text(e))
            print(f"[{key}] failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            free_memory(device)
        res["seconds"] = time.perf_counter() - t0
        report["meta"]["total_seconds"] = time.perf_counter() - t_start
        write(report, out)
        print(f"[{key}] {res['status']} in {res['seconds']:.1f} s", flush=True)

    held: dict = {}

    def make(res):
        held["model"], info = build_model(TINY_SHAPE if args.tiny else lumina_7b_config(), device)
        res.update(info, shape="tiny" if args.tiny else "lumina-mgpt-7b")

    part("model", make)
    part("bandwidth", lambda res: bandwidth(device, args.tiny, res))
    model = held.get("model")
    for key, fn in [
        ("forward", lambda res: forward_curve(model, report["model"], device, args, res)),
        ("plain", lambda res: plain(model, device, args, res)),
        ("overhead", lambda res: overhead(model, device, args, res, report)),
        ("batch", lambda res: batches(model, device, args, res)),
        ("lumina2", lambda res: lumina2(model, device, args, res, report)),
    ]:
        part(key, fn, skip=model is None or getattr(args, f"skip_{key}"))
    model = None
    held.clear()
    free_memory(device)
    if not args.skip_compiled:
        held["model"], _ = build_model(TINY_SHAPE if args.tiny else lumina_7b_config(), device)
        with replay.on_cpu() if args.emulate_graphs else contextlib.nullcontext():
            part("compiled", lambda res: compiled_overhead(held["model"], device, args, res, report))
        held.clear()
        free_memory(device)
    else:
        report["compiled"]["status"] = "skipped"
    part("embedded", lambda res: embedded_bench(out, args, res), skip=args.skip_embedded)
    part("table", lambda res: projection(report, res))
    report["meta"]["total_seconds"] = time.perf_counter() - t_start
    write(report, out)
    print(markdown(report), flush=True)
    return report


if __name__ == "__main__":
    main()
