"""The load path and the forward at real shapes on this CPU, each run in a fresh process.

    python benchmarks/scale/measure.py --model janus:/work/scale-ckpt/janus-pro-1b --dtype bf16 \\
        --out benchmarks/scale/janus-pro-1b-bf16.json [--quantize int8] [--generate]

Records, with the git commit, CPU model, torch threads and the machine's load average:

- **load**: seconds, the process's resident memory before loading and its peak (``VmHWM`` of
  ``/proc/self/status``, reset after the imports and a load of the ``--warm`` checkpoint) and after,
  against the memory plan's load peak and weights (:mod:`jacobigen.models.memory`);
- **forward**: ms per forward of a block of 1, 4, 16, 32 and 64 tokens with the CFG pair (2 rows)
  after a prompt of 64 in the cache (median of ``--repeats`` after one warm-up);
- ``--generate``: one whole image through ``jacobigen generate`` (``ar`` and ``scd-mc`` at window 16,
  the VQ decode included) in this process, its stats.json figures per forward and per iteration.

``--dtype`` sets the family loaders' default dtype (the command line's ``--dtype`` is another change).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
BLOCKS = (1, 4, 16, 32, 64)


def status(field: str) -> int:
    """Bytes of a ``VmRSS``/``VmHWM`` line of /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    root = Path(__file__).resolve().parents[2]
    git = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "src"], capture_output=True, text=True)
    return {
        "git_commit": git.stdout.strip(),
        "git_dirty": bool(dirty.stdout.strip()),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def force_dtype(dtype: torch.dtype) -> None:
    """The families' default dtype, for this process."""
    from jacobigen.models.families import base, chameleon, cosmos, emu3, janus, llamagen, lumina2

    for module in (base, janus, lumina2, chameleon, emu3, llamagen, cosmos):
        module.default_dtype = lambda _device, d=dtype: d


def load(spec: str, quantize: str | None) -> tuple[object, dict]:
    from jacobigen.models import memory, shapes
    from jacobigen.models.load import load_bundle

    shape = shapes.shape_of(spec)
    plan = memory.plan(shape, dtype=FORCED[0], quantize=quantize, free=None)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = status("VmRSS")
    start = time.perf_counter()
    bundle = load_bundle(spec, "cpu", quantize=quantize)
    seconds = time.perf_counter() - start
    peak, after = status("VmHWM"), status("VmRSS")
    gib = 2**30
    return bundle, {
        "load_s": round(seconds, 1),
        "rss_before_gib": round(before / gib, 3),
        "rss_peak_gib": round(peak / gib, 3),
        "rss_after_gib": round(after / gib, 3),
        "load_peak_over_before_gib": round((peak - before) / gib, 3),
        "plan_weights_gib": round(plan.weights / gib, 3),
        "plan_load_peak_gib": round(plan.peak_loading / gib, 3),
        "measured_over_plan": round((peak - before) / plan.peak_loading, 3),
        "plan": plan.text(),
    }


@torch.inference_mode()
def forwards(model, prompt: int = 64, repeats: int = 3) -> dict:
    """ms per forward of each block size with 2 rows (the CFG pair) after ``prompt`` cached tokens."""
    rows, capacity = 2, prompt + max(BLOCKS) + 64
    cache = model.new_cache(rows, capacity)
    vocab = min(model.vocab_size, 1000)
    slots = torch.arange(capacity)

    def mask(start: int, t: int) -> torch.Tensor:
        allowed = slots[None, :] <= start + torch.arange(t)[:, None]
        m = torch.zeros(t, capacity).masked_fill(~allowed, float("-inf"))
        return m.expand(rows, 1, t, capacity)

    def run(start: int, t: int):
        tokens = torch.randint(0, vocab, (rows, t))
        positions = (start + torch.arange(t)).expand(rows, t)
        return model(tokens, positions, mask(start, t), cache)

    run(0, prompt)
    cache.commit(None, torch.full((rows,), prompt))
    out = {}
    for t in BLOCKS:
        run(prompt, t)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run(prompt, t)
            times.append((time.perf_counter() - start) * 1000)
        out[str(t)] = round(statistics.median(times), 1)
    return out


def generate(spec: str, quantize: str | None, out_dir: Path, threads: int) -> dict:
    """One image through ``jacobigen generate`` (this process) per method; stats.json's figures."""
    from click.testing import CliRunner

    from jacobigen.cli.group import main
    from jacobigen.models import memory, shapes

    results = {}
    for name, (method, window) in {"ar": ("ar", 1), "scd-mc-16": ("scd-mc", 16)}.items():
        out_dir.mkdir(parents=True, exist_ok=True)
        image, stats_file = out_dir / f"{name}.png", out_dir / f"{name}.json"
        argv = ["generate", "--model", spec, "a red fox in the snow", "--seed", "0", "--out", str(image)]
        argv += ["--stats", str(stats_file), "--force", "--method", method, "--window", str(window)]
        argv += ["--threads", str(threads)] + (["--quantize", quantize] if quantize else [])
        plan = memory.plan(shapes.shape_of(spec), dtype=FORCED[0], quantize=quantize, window=window, free=None)
        Path("/proc/self/clear_refs").write_text("5")
        before = status("VmRSS")
        res = CliRunner().invoke(main, argv, catch_exceptions=False)
        peak = status("VmHWM") - before
        stats = json.loads(stats_file.read_text())
        results[name] = {
            "output": res.output.strip().splitlines()[-4:],
            "stats": stats,
            # the whole command's peak (load, decode, VQ decode) against the plan's: the decode's working
            # set is the peak less the weights
            "rss_peak_over_before_gib": round(peak / 2**30, 3),
            "plan_total_gib": round(max(plan.total, plan.peak_loading) / 2**30, 3),
            "plan_working_gib": round(plan.working / 2**30, 3),
            "measured_working_over_plan": round((peak - plan.weights) / plan.working, 3),
        }
    return results


FORCED = [torch.bfloat16]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--quantize", choices=["int8"], default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--repeats", type=int, default=3, help="timed forwards per block size (after one warm-up)")
    ap.add_argument("--warm", type=Path, help="a small checkpoint of the family loaded first: its imports")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    FORCED[0] = DTYPES[a.dtype]
    force_dtype(DTYPES[a.dtype])
    from jacobigen.core.quantize import quiet_torchao

    with quiet_torchao():
        import transformers  # noqa: F401  (imported before the memory baseline, as the loader would)
    record = {"model": a.model, "dtype": a.dtype, "quantize": a.quantize, **machine()}
    if a.warm:  # the modules a load imports are not the load's memory
        from jacobigen.models.load import load_bundle

        load_bundle(f"{a.model.partition(':')[0]}:{a.warm}", "cpu", quantize=a.quantize)
    bundle, record["load"] = load(a.model, a.quantize)
    print(json.dumps(record["load"], indent=1), file=sys.stderr)
    record["forward_ms_cfg_pair"] = forwards(bundle.model, repeats=a.repeats)
    print(record["forward_ms_cfg_pair"], file=sys.stderr)
    if a.generate:
        del bundle
        record["generate"] = generate(a.model, a.quantize, Path("/tmp") / a.out.stem, a.threads)
    record["load_average_after"] = os.getloadavg()
    a.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
