#!/usr/bin/env python
"""One prepared GPU measurement run (issue 13 item 5): three parts, each with its own time budget.

a. ``cost_curve``: seconds per forward for block sizes 1..160 after a 2,400-token cache, CFG batch
   of 2 rows, on a random-weight model with Lumina-mGPT-7B's shape (transformers'
   ``ChameleonForConditionalGeneration`` behind jacobigen's Chameleon adapter), bf16.
b. ``overhead``: per-iteration overhead of every lossless preset (``jacobigen.METHODS``) on that
   model: ``generate`` on a short image at windows 16 and 32; nfe, wall, forward time, overhead
   share (1 - forward / wall) and ms of overhead per iteration. Random weights: acceptance is not
   meaningful here, the overhead is.
c. ``embedded``: ``jacobigen bench`` on the embedded emoji model (subprocess, with a timeout).

Each part runs under try/except and its own budget; ``measure.json`` and ``measure.md`` are
rewritten after every part, so a failure or a kill keeps the figures already taken.

``--tiny`` swaps the 7B shape for a 2-layer Chameleon, fewer block sizes, a 128-token cache and a
4x4 image, so CI can run the whole script on a CPU in seconds (tests/test_gpu_script.py).
See benchmarks/gpu/README.md for the command to run on a lent GPU machine.
"""

from __future__ import annotations

import argparse
import gc
import inspect
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
from jacobigen.decode.methods import split_variants
from jacobigen.tools.costs import block_size

MIN_TRANSFORMERS = "5.24"  # pyproject's families extra: the adapter's ``cache=`` keyword
REFERENCE_TREE = "sjd-pac[tree_budget=full,window=64]"  # the authors' 21-node tree in their 64-token block

# Lumina-mGPT-7B is Chameleon-7B's architecture (qk-norm over (heads, head_dim) in every layer,
# swin_norm off, no GQA). Lumina raises the context above Chameleon's 4096; only RoPE (computed on
# the fly) and jacobigen's max_seq_len check read it, so the exact value does not change the cost.
SHAPE_7B = dict(
    vocab_size=65536,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    max_position_embeddings=8192,
    swin_norm=False,
    codes=8192,
)
SHAPE_TINY = dict(
    vocab_size=160,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=512,
    swin_norm=False,
    codes=64,
    vq_config=dict(
        embed_dim=8,
        num_embeddings=64,
        latent_channels=8,
        base_channels=32,
        channel_multiplier=[1, 1],
        num_res_blocks=1,
        resolution=32,
    ),
)

# Budgets (seconds) keep the whole run near 7 minutes on an H200, model build and imports included.
FULL = dict(
    sizes=[1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160],
    context=2400,
    reps=10,
    warmup=3,
    grid=16,
    budget_curve=60.0,
    budget_overhead=200.0,
    embedded_timeout=150.0,
)
TINY = dict(
    sizes=[1, 2, 4, 8, 16],
    context=128,
    reps=3,
    warmup=1,
    grid=4,
    budget_curve=30.0,
    budget_overhead=60.0,
    embedded_timeout=120.0,
)


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


def vocabulary_map(codes: int, text_ids: range) -> dict[str, int]:
    """Chameleon's naming: image code c is the BPE token ``IMGIMG<c in letters A-J>Z``, here at ids
    4..4+codes (as in Chameleon's vocabulary); ``text_ids`` get plain names."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for code in range(codes):
        vocab["IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(code)) + "Z"] = 4 + code
    for i in text_ids:
        vocab[f"<t{i}>"] = i
    return vocab


def transformers_version_ok() -> str:
    import transformers
    from packaging.version import Version

    v = transformers.__version__
    if Version(v) < Version(MIN_TRANSFORMERS):
        raise RuntimeError(
            f"transformers {v} < {MIN_TRANSFORMERS}: jacobigen's Chameleon adapter needs "
            f"the newer cache keyword (carry the wheel: benchmarks/gpu/README.md)"
        )
    return v


def build_model(shape: dict, device: torch.device, seed: int = 0):
    """Random-weight ChameleonForConditionalGeneration of ``shape`` behind jacobigen's adapter.
    Returns (adapter, layout builder info)."""
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    from jacobigen.models.families.base import contiguous_range, default_dtype
    from jacobigen.models.families.chameleon import chameleon_adapter

    shape = dict(shape)
    codes = shape.pop("codes")
    vq = shape.pop("vq_config", None)
    vocab = vocabulary_map(codes, range(4 + codes, 4 + codes + 8))
    cfg = ChameleonConfig(
        **shape,
        vocabulary_map=vocab,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        **({"vq_config": vq} if vq else {}),
    )
    cfg._attn_implementation = "sdpa"
    dtype = default_dtype(device)  # bf16 on CUDA, as jacobigen loads real checkpoints
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    with torch.device(device):
        hf = ChameleonForConditionalGeneration._from_config(cfg, dtype=dtype)
    hf = hf.to(device).eval()
    sync(device)
    build_s = time.perf_counter() - t0
    adapter = chameleon_adapter(hf)
    image_ids = contiguous_range(hf.model.vocabulary_mapping.image_tokens, "Chameleon")
    n_params = sum(p.numel() for p in hf.parameters())
    n_decoder = sum(p.numel() for n, p in hf.named_parameters() if "vqmodel" not in n)
    info = {
        "config": {k: v for k, v in shape.items()},
        "codes": codes,
        "image_ids": list(image_ids),
        "params": n_params,
        "params_without_vq": n_decoder,
        "dtype": str(dtype).replace("torch.", ""),
        "attn_implementation": "sdpa",
        "build_seconds": build_s,
    }
    return adapter, info


# --- part a: the forward cost curve -------------------------------------------------------------


def cost_curve(model, device, sizes, context, rows, reps, warmup, budget, result):
    """Seconds per forward of a block of each size after ``context`` cached tokens in each of ``rows``
    rows (the CFG pair), one cache of capacity context + max(sizes) for all sizes, as a decode has
    one cache sized for the whole sequence. The mask is built outside the timed region, as in
    JacobiDecoder._forward; its own cost is reported as ``mask_s``."""
    t_part = time.perf_counter()
    capacity = context + max(sizes)
    cache = model.new_cache(rows, capacity)
    cache.lengths += context  # update() writes after the length and commit() is never called,
    g = torch.Generator(device="cpu").manual_seed(0)  # so every rep sees the same 2,400 entries
    result.update(rows=rows, context=context, capacity=capacity, reps=reps, warmup=warmup, points=[])
    for size in sizes:
        if time.perf_counter() - t_part > budget:
            result.setdefault("skipped", []).append(size)
            continue
        tokens = torch.randint(4, 4 + 64, (rows, size), generator=g).to(device)
        positions = torch.arange(context, context + size, device=device).expand(rows, size)
        times, mask_times = [], []
        for rep in range(warmup + reps):
            sync(device)
            t0 = time.perf_counter()
            mask = block_mask(cache.lengths, cache.capacity, causal(size, device))
            sync(device)
            t1 = time.perf_counter()
            with torch.inference_mode():
                model(tokens, positions, mask, cache)
            sync(device)
            t2 = time.perf_counter()
            if rep >= warmup:
                times.append(t2 - t1)
                mask_times.append(t1 - t0)
        med = statistics.median(times)
        result["points"].append(
            {
                "block": size,
                "median_s": med,
                "min_s": min(times),
                "max_s": max(times),
                "mask_s": statistics.median(mask_times),
                "tokens_per_s": rows * size / med,
            }
        )
    base = next((p["median_s"] for p in result["points"] if p["block"] == 1), None)
    for p in result["points"]:
        p["vs_block1"] = p["median_s"] / base if base else None
    result["status"] = "partial" if result.get("skipped") else "ok"
    if device.type == "cuda":
        result["peak_memory_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    del cache
    free_memory(device)


# --- part b: per-iteration overhead of the lossless presets --------------------------------------


def preset_overhead(model, device, info, grid, windows, methods, budget, result, prompt_len=16, seed=0):
    from jacobigen import METHODS, ImageLayout, generate
    from jacobigen.decode.methods import parse_variant
    from jacobigen.models.families.chameleon import DEFAULTS

    lo, hi = info["image_ids"]
    # stand-ins outside the image range for <reserved08799> (EOL) and <eoss> (end of image)
    layout = ImageLayout(grid, grid, (lo, hi), eol_id=hi, end_id=hi + 1)
    header = [hi + 2, hi + 3, hi + 3]  # like Lumina's <racm3:break> + two size tokens
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(hi + 4, model.vocab_size, (prompt_len,), generator=g).tolist()
    prompt, uncond = text + header, header  # Lumina's CFG: the unconditional prompt is the header
    sampling = dict(DEFAULTS)
    timing = "timing" in inspect.signature(generate).parameters
    extra = {"timing": True} if timing else {}
    methods = methods or [*(name for name, m in METHODS.items() if m.lossless), REFERENCE_TREE]
    runs = [(name, parse_variant(name).window or w) for name in methods for w in windows]
    runs = list(dict.fromkeys(runs))  # ar has a fixed window: once
    result.update(
        layout={"rows": grid, "cols": grid, "eol": True, "length": layout.length},
        prompt_tokens=len(prompt),
        uncond_tokens=len(uncond),
        sampling=sampling,
        timing_keyword=timing,
        seed=seed,
        runs=[],
        skipped=[],
        errors=[],
    )

    def run(name, window):
        v = parse_variant(name)
        gen = generate(
            model,
            prompt,
            layout=layout,
            method=v.method.name,
            window=window,
            seed=seed,
            uncond=uncond,
            **v.options,
            **sampling,
            **extra,
        )
        return gen.stats

    t_part = time.perf_counter()
    for name, window in [("sjd", max(windows)), ("sjd-pac", min(windows))]:  # warm-up, untimed
        if name in METHODS:
            run(name, window)
    result["warmup_seconds"] = time.perf_counter() - t_part
    last = 0.0
    for name, window in runs:
        spent = time.perf_counter() - t_part
        if spent + last > budget:
            result["skipped"].append({"method": name, "window": window})
            continue
        t0 = time.perf_counter()
        try:
            s = run(name, window)
        except Exception as e:  # one preset failing keeps the others
            result["errors"].append({"method": name, "window": window, "error": error_text(e)})
            continue
        last = time.perf_counter() - t0
        # one sequence: one ``committed`` entry per iteration; the prefill is the remaining forward
        iters = len(getattr(s, "committed", None) or []) or max(s.nfe - 1, 1)
        over = s.wall_time - s.forward_time
        try:
            block = block_size(parse_variant(name).build(window), layout)
        except Exception:
            block = None
        result["runs"].append(
            {
                "method": name,
                "window": window,
                "block": block,
                "nfe": s.nfe,
                "iterations": iters,
                "wall_s": s.wall_time,
                "forward_s": s.forward_time,
                "overhead_s": over,
                "overhead_share": over / s.wall_time if s.wall_time else None,
                "overhead_ms_per_iter": 1000 * over / iters,
                "forward_ms_per_iter": 1000 * s.forward_time / iters,
                "mean_accepted": getattr(s, "mean_accepted", None),
                "histogram": {str(k): v for k, v in s.histogram().items()},
            }
        )
    if not result["runs"]:
        raise RuntimeError(
            f"no preset ran: {len(result['errors'])} errors, {len(result['skipped'])} skipped"
            + (f"; first error:\n{result['errors'][0]['error']}" if result["errors"] else "")
        )
    result["status"] = "partial" if result["errors"] or result["skipped"] else "ok"


# --- part c: the embedded model's bench ----------------------------------------------------------


def embedded_bench(
    out: Path, device: str, methods: str, windows: str, prompts: int, timeout: float, keep_plots: bool, result
):
    dest = out / "embedded"
    cmd = [
        sys.executable,
        "-c",
        "import sys; from jacobigen.cli import main; sys.exit(main())",
        "bench",
        "--model",
        "default",
        "--methods",
        methods,
        "--window",
        windows,
        "--prompts",
        str(prompts),
        "--device",
        device,
        "--out",
        str(dest),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    result.update(command=["jacobigen", *cmd[3:]], timeout_s=timeout)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        tail = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        result.update(status="timeout", seconds=time.perf_counter() - t0, output_tail=tail[-2000:])
        return
    result.update(
        returncode=proc.returncode, seconds=time.perf_counter() - t0, output_tail=(proc.stdout + proc.stderr)[-2000:]
    )
    if not keep_plots:  # the lent machine returns at most 8 files: keep bench.json and bench.md
        for png in dest.glob("*.png"):
            png.unlink()
    if proc.returncode != 0:
        raise RuntimeError(f"jacobigen bench exited with {proc.returncode}:\n{(proc.stdout + proc.stderr)[-1500:]}")
    bench = json.loads((dest / "bench.json").read_text())
    result["rows"] = [
        {
            k: r.get(k)
            for k in (
                "method",
                "window",
                "lossless",
                "nfe",
                "wall",
                "forward",
                "step_compression",
                "latency_speedup",
                "overhead_share",
                "nodes",
                "tokens_per_node",
                "sibling_tokens",
            )
        }
        for r in bench.get("rows", [])
    ]


# --- report ---------------------------------------------------------------------------------------


def fmt(x, spec=".3g"):
    return "-" if x is None else format(x, spec)


def markdown(report: dict) -> str:
    m = report["meta"]
    lines = [
        f"# GPU measurements ({'tiny' if m['tiny'] else 'Lumina-mGPT-7B shape'}, {m['device_name']})",
        "",
        f"torch {m['torch']}, transformers {m.get('transformers', '-')}, jacobigen {m['jacobigen']} "
        f"({m['git']}), {m['started']}, {fmt(m.get('total_seconds'), '.0f')} s in all.",
        "",
    ]
    mod = report.get("model", {})
    if mod.get("params"):
        lines += [
            f"Model: random weights, {mod['params'] / 1e6:,.1f} M parameters "
            f"({mod['params_without_vq'] / 1e6:,.1f} M without the VQ), {mod['dtype']}, "
            f"{mod['attn_implementation']}, built in {mod['build_seconds']:.1f} s.",
            "",
        ]
    for key in ("model", "cost_curve", "overhead", "embedded"):
        part = report.get(key, {})
        if part.get("status") in ("error", "timeout"):
            lines += [f"**{key}: {part['status']}**", "", "```", (part.get("error") or "").strip()[-1200:], "```", ""]
    c = report.get("cost_curve", {})
    if c.get("points"):
        lines += [
            f"## Forward cost ({c['rows']} rows, {c['context']} cached tokens, capacity {c['capacity']}, "
            f"median of {c['reps']})",
            "",
            "| block | ms / forward | min ms | vs block 1 | tokens/s | mask ms |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {p['block']} | {1e3 * p['median_s']:.2f} | {1e3 * p['min_s']:.2f} | {fmt(p['vs_block1'], '.2f')} "
            f"| {p['tokens_per_s']:.0f} | {1e3 * p['mask_s']:.3f} |"
            for p in c["points"]
        ]
        lines += [""]
    o = report.get("overhead", {})
    if o.get("runs"):
        lay = o["layout"]
        lines += [
            f"## Per-iteration overhead ({lay['rows']}x{lay['cols']} + EOL = {lay['length']} tokens, "
            f"prompt {o['prompt_tokens']} tokens, CFG {o['sampling'].get('cfg')}, top-k "
            f"{o['sampling'].get('top_k')})",
            "",
            "| method | window | block | nfe | wall s | forward s | overhead share | overhead ms/iter "
            "| forward ms/iter | tokens/forward |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['method']} | {r['window']} | {fmt(r['block'], 'd')} | {r['nfe']} | {r['wall_s']:.2f} | "
            f"{r['forward_s']:.2f} | {fmt(r['overhead_share'], '.1%')} | {r['overhead_ms_per_iter']:.2f} | "
            f"{r['forward_ms_per_iter']:.2f} | {fmt(r['mean_accepted'], '.2f')} |"
            for r in o["runs"]
        ]
        for s in o.get("skipped", []):
            lines.append(f"\nskipped (budget): {s['method']} window {s['window']}")
        for e in o.get("errors", []):
            lines.append(f"\nerror: {e['method']} window {e['window']}: {e['error'].strip().splitlines()[-1]}")
        lines += [""]
    e = report.get("embedded", {})
    if e.get("rows"):
        lines += [
            "## Embedded model bench (`" + " ".join(e["command"]) + "`)",
            "",
            "| method | window | nfe | wall s | step compression | latency speedup | overhead share |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['method']} | {r['window']} | {fmt(r['nfe'], '.1f')} | {fmt(r['wall'], '.3f')} | "
            f"{fmt(r['step_compression'], '.2f')} | {fmt(r['latency_speedup'], '.2f')} | "
            f"{fmt(r['overhead_share'], '.1%')} |"
            for r in e["rows"]
        ]
        lines += [""]
    return "\n".join(lines)


def write(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "measure.json").write_text(json.dumps(report, indent=1))
    (out / "measure.md").write_text(markdown(report))


def summary(report: dict) -> str:
    lines = [f"== measure.py: {report['meta'].get('total_seconds', 0):.0f} s, {report['meta']['device_name']}"]
    c = report.get("cost_curve", {})
    pts = " ".join(f"{p['block']}:{1e3 * p['median_s']:.1f}" for p in c.get("points", []))
    lines.append(f"cost_curve [{c.get('status')}] ms/forward by block: {pts}")
    o = report.get("overhead", {})
    lines.append(
        f"overhead [{o.get('status')}] {len(o.get('runs', []))} runs, {len(o.get('skipped', []))} skipped, "
        f"{len(o.get('errors', []))} errors"
    )
    for r in o.get("runs", []):
        lines.append(
            f"  {r['method']:>14} w{r['window']:<3} nfe {r['nfe']:>4}  overhead "
            f"{r['overhead_ms_per_iter']:6.2f} ms/iter ({fmt(r['overhead_share'], '.0%')})  forward "
            f"{r['forward_ms_per_iter']:6.2f} ms/iter"
        )
    e = report.get("embedded", {})
    lines.append(
        f"embedded [{e.get('status')}] "
        + " ".join(f"{r['method']}/w{r['window']}:x{fmt(r['latency_speedup'], '.2f')}" for r in e.get("rows", []))
    )
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------------------


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def parse(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--out", type=Path, default=None, help="output folder (default: $OUT if set, else benchmarks/gpu/out)"
    )
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--tiny", action="store_true", help="tiny Chameleon, small cache and image (CI, CPU)")
    p.add_argument("--sizes", type=ints, default=None, help="block sizes of the cost curve")
    p.add_argument("--context", type=int, default=None, help="cached tokens per row for the cost curve")
    p.add_argument("--reps", type=int, default=None, help="timed forwards per block size (median)")
    p.add_argument("--grid", type=int, default=None, help="image side in tokens for the overhead runs")
    p.add_argument("--windows", type=ints, default=[16, 32])
    p.add_argument("--methods", default=None, help="comma-separated presets (default: every lossless one)")
    p.add_argument("--budget-curve", type=float, default=None, help="seconds for part a")
    p.add_argument("--budget-overhead", type=float, default=None, help="seconds for part b")
    p.add_argument("--skip-curve", action="store_true")
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--skip-embedded", action="store_true")
    p.add_argument("--embedded-timeout", type=float, default=None, help="seconds for part c")
    p.add_argument("--embedded-methods", default=f"sjd,scd-mc,scd-gs,sjd-pac,{REFERENCE_TREE}")
    p.add_argument("--embedded-windows", default="16,32")
    p.add_argument("--embedded-prompts", type=int, default=2)
    p.add_argument("--keep-plots", action="store_true", help="keep the embedded bench's PNGs")
    args = p.parse_args(argv)
    d = TINY if args.tiny else FULL
    for k, v in d.items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    args.out = args.out or Path(os.environ.get("OUT") or REPO / "benchmarks" / "gpu" / "out")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return args


def git_describe() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return (rev + ("+dirty" if dirty else "")) or "unknown"
    except Exception:
        return "unknown"


def main(argv=None) -> dict:
    args = parse(argv)
    t_start = time.perf_counter()
    device = torch.device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU x{os.cpu_count()}"
    report = {
        "meta": {
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
            "argv": sys.argv[1:] if argv is None else list(argv),
        }
    }
    report["model"] = {"status": "pending"}
    report["cost_curve"] = {"status": "skipped" if args.skip_curve else "pending"}
    report["overhead"] = {"status": "skipped" if args.skip_overhead else "pending"}
    report["embedded"] = {"status": "skipped" if args.skip_embedded else "pending"}
    write(report, out)

    def part(key, fn):
        res = report[key]
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

    model = None
    if not (args.skip_curve and args.skip_overhead):

        def make(res):
            nonlocal model
            report["meta"]["transformers"] = transformers_version_ok()
            model, info = build_model(SHAPE_TINY if args.tiny else SHAPE_7B, device)
            res.update(info, shape="tiny" if args.tiny else "lumina-mgpt-7b")

        part("model", make)
    else:
        report["model"]["status"] = "skipped"

    for key, skip, fn in [
        (
            "cost_curve",
            args.skip_curve,
            lambda res: cost_curve(
                model, device, args.sizes, args.context, 2, args.reps, args.warmup, args.budget_curve, res
            ),
        ),
        (
            "overhead",
            args.skip_overhead,
            lambda res: preset_overhead(
                model,
                device,
                report["model"],
                args.grid,
                args.windows,
                split_variants(args.methods) if args.methods else None,
                args.budget_overhead,
                res,
            ),
        ),
    ]:
        if skip:
            continue
        if model is None:
            report[key].update(status="error", error="no model: see model.error")
            write(report, out)
            continue
        part(key, fn)

    model = None  # frees the big model before the embedded bench
    free_memory(device)
    if not args.skip_embedded:
        part(
            "embedded",
            lambda res: embedded_bench(
                out,
                args.device,
                args.embedded_methods,
                args.embedded_windows,
                args.embedded_prompts,
                args.embedded_timeout,
                args.keep_plots,
                res,
            ),
        )
    report["meta"]["total_seconds"] = time.perf_counter() - t_start
    write(report, out)
    print(summary(report), flush=True)
    print(f"wrote {out}/measure.json and measure.md", flush=True)
    return report


if __name__ == "__main__":
    main()
