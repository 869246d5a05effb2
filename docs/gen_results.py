"""Write the results pages from the committed benchmark outputs, so that no figure is typed by hand.

    python docs/gen_results.py          # rewrite docs/results.md and README.md's headline table
    python docs/gen_results.py --check  # exit 1 if either is stale (tests/test_docs.py runs this)

``docs/results.in.md`` holds the prose; each ``<!-- table: NAME -->`` line in it is replaced by the
table ``TABLES[NAME]`` renders from the JSON (and the profile markdown) under ``benchmarks/``.
README.md's table between ``<!-- headline:start -->`` and ``<!-- headline:end -->`` comes from
:func:`headline`. It reads files and imports no torch: the bench's own table and formats come from
:mod:`jacobigen.tools.bench_report`.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

from jacobigen.tools.bench_report import md_table, pct, table, throughput_table  # torch-free: reads and formats
from jacobigen.tools.bench_rows import Row

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
TEMPLATE = ROOT / "docs" / "results.in.md"
RESULTS = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
HEAD_START, HEAD_END = "<!-- headline:start -->", "<!-- headline:end -->"
BASELINES = ("ar", "plain-ar", "plain-ar-float32")


def load(rel: str) -> dict:
    return json.loads((BENCH / rel).read_text())


def x(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}x"


def window(r: dict) -> str:
    return f"{'auto: ' if r.get('auto') else ''}{r['window']}"


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def rows_by_key(rel: str) -> dict[tuple[str, int], dict]:
    return {(r["method"], r["window"]): r for r in load(rel)["rows"]}


# --- the tables -------------------------------------------------------------------------------


def every_method() -> str:
    """`jacobigen bench` on the embedded model, one thread: the full table (as its bench.md)."""
    return table([Row.from_dict(r) for r in load("embedded/threads-1/bench.json")["rows"]])


TREE_LABELS = {
    "sjd-pac": "`sjd-pac` (auto budget)",
    "sjd-pac[tree_budget=full]": "`sjd-pac[tree_budget=full]` (reference, 21 nodes)",
    "sjd-pac[tree_depth=4,tree_budget=full,window=113]": "84-node tree",
}


def compression_48() -> dict[tuple[str, int], str]:
    """Step compression over 48 images per row, from benchmarks/tree/compression.md (its own script)."""
    out = {}
    for line in (BENCH / "tree" / "compression.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1].isdigit():
            out[(cells[0], int(cells[1]))] = cells[3]
    return out


def images(rel: str) -> int:
    """Images per row of a bench: prompts x seeds."""
    d = load(rel)
    return len(d["prompts"]) * d["seeds"]


def tree() -> str:
    one, two = rows_by_key("tree/threads-1/bench.json"), rows_by_key("tree/threads-2/bench.json")
    many = compression_48()
    cols = [
        "method",
        "window (block)",
        f"step compression, {images('tree/threads-1/bench.json')} images",
        "step compression, 48 images",
        "latency, 1 thread",
        "latency, 2 threads",
        "sibling tokens/image",
    ]
    order = ["scd-mc", "scd-gs", "sjd-pac", "sjd-pac[tree_min_gain=0]", "sjd-pac[tree_budget=full]"]
    keys = sorted(
        (k for k in one if k[0] not in BASELINES),
        key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[0], k[1]),
    )
    cells = []
    for key in keys:
        r, r2 = one[key], two.get(key)
        name, w = key
        block = "32 (113)" if "window=113" in name else str(w)
        cells.append(
            [
                TREE_LABELS.get(name, f"`{name}`"),
                block,
                x(r["step_compression"]),
                many.get(key, "-"),
                x(r["latency_speedup"]),
                x(r2["latency_speedup"]) if r2 else "-",
                f"{r['sibling_tokens']:.1f}",
            ]
        )
    return md_table(cols, cells)


def quality() -> str:
    cols = [
        "method",
        "window",
        "lossless",
        "NFE/image",
        "step compression",
        "latency speedup",
        "1-token iterations",
        "overhead share",
        "FID vs ar",
        "FID vs data",
    ]

    def fid(v):
        return "-" if v is None else f"{v:.1f}"

    cells = [
        [
            r["method"],
            window(r),
            yes(r["lossless"]),
            f"{r['nfe']:.1f}",
            x(r["step_compression"]),
            x(r["latency_speedup"]),
            pct(r["single_token_share"]),
            pct(r["overhead_share"]),
            fid(r["fid_vs_ar"]),
            fid(r["fid_vs_data"]),
        ]
        for r in load("quality/bench.json")["rows"]
        if r["method"] != "plain-ar"
    ]
    return md_table(cols, cells)


def lossy() -> str:
    d = load("lossy/lossy.json")
    cols = ["method", "options", "lossless", "step compression", "TV from exact", "FID vs ar", "FID vs data"]

    def num(v, digits):
        return "-" if v is None else f"{v:.{digits}f}"

    cells = [
        [
            r["method"],
            ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "-",
            yes(r["lossless"]),
            x(r["step_compression"]),
            num(r["tv_from_exact"], 3),
            num(r.get("fid_vs_ar"), 1),
            num(r.get("fid_vs_data"), 1),
        ]
        for r in d["rows"]
    ]
    return md_table(cols, cells) + f"\nTV noise floor (`sjd`, exact, same sample size): {d['tv_noise_floor']:.3f}.\n"


def throughput(folder: str = "throughput") -> str:
    return throughput_table(load(f"{folder}/throughput.json")["rows"])


def sampling(d: dict) -> str:
    """A bench's sampling as its command-line options (only those that filter or scale)."""
    s = d["sampling"]
    return ", ".join(f"{k.replace('_', '-')} {s[k]}" for k in ("top_k", "top_p") if s.get(k) is not None) or "all ids"


VIDEO_RUNS = ("still", "still-top-p")  # benchmarks/video-emoji/NAME: model (models.json key), sampling


def video_models() -> str:
    """The shipped clip model: what its training data repeats from frame to frame, and what each
    method makes of it under each sampling (`benchmarks/video-emoji/{still,still-top-p}`)."""
    models = load("video-emoji/models.json")
    cols = [
        "model",
        "training clips: unchanged-token share",
        "held-out CE, frame 1 / frames 2-8",
        "sampling",
        "method",
        "window",
        "forwards per clip",
        "step compression",
        "latency vs plain-AR loop",
    ]
    runs = {name: load(f"video-emoji/{name}/bench.json") for name in VIDEO_RUNS}
    cells = []
    for name, d in runs.items():
        m = models[name.split("-")[0]]
        later = sum(m["heldout_ce_per_frame"][1:]) / (len(m["heldout_ce_per_frame"]) - 1)
        for r in d["rows"]:
            if r["method"] in BASELINES:
                continue
            cells.append(
                [
                    m["label"],
                    f"{m['unchanged_share']:.1%}",
                    f"{m['heldout_ce_per_frame'][0]:.2f} / {later:.2f}",
                    sampling(d),
                    f"`{r['method']}`",
                    window(r),
                    f"{r['nfe']:.1f}",
                    x(r["step_compression"]),
                    x(r["latency_speedup"]),
                ]
            )
    plain = ", ".join(f"{d['baseline']['wall_seconds']:.1f} s ({name})" for name, d in runs.items())
    return md_table(cols, cells) + f"\nThe plain loop took {plain} per clip, in the same process as each run's rows.\n"


def video_names() -> str:
    """The clip model of the curated names (`benchmarks/video-names/`), beside `emoji-video`'s run at
    its own sampling: step compression before and after the default clip model changed."""
    d, before = load("video-names/bench.json"), rows_by_key("video-emoji/still-top-p/bench.json")
    cols = ["method", "window", "forwards per clip", "step compression", "latency vs fastest baseline",
            "1-token iterations", "`emoji-video` (before): step compression"]  # fmt: skip
    cells = [
        [
            f"`{r['method']}`",
            window(r),
            f"{r['nfe']:.1f}",
            x(r["step_compression"]),
            x(r["latency_speedup"]),
            f"{r['single_token_share']:.0%}",
            x(before[(r["method"], r["window"])]["step_compression"]),
        ]
        for r in d["rows"]
        if r["method"] not in BASELINES
    ]
    b = d["baseline"]
    return md_table(cols, cells) + (
        f"\n{d['model']} in {d['dtype']}; fastest baseline `{b['wall']}`, {b['wall_seconds']:.1f} s per clip, in the"
        " same process.\n"
    )


def h200_forward() -> str:
    step = load("gpu/h200-step/measure.json")["forward"]
    old = {p["block"]: p["median_s"] * 1000 for p in load("gpu/h200/measure.json")["cost_curve"]["points"]}
    blocks = [1, 16, 32, 64]
    names = {
        "eager": "ours, eager",
        "graphed": "ours, replayed as a CUDA graph (`Graphed`)",
        "compiled+graphed": "ours, compiled (inductor) and replayed as a CUDA graph",
    }
    ms = {(p["variant"], p["block"]): p["median_ms"] for p in step["points"]}
    cells = [["transformers eager (earlier run)"] + [f"{old[b]:.1f}" if b in old else "-" for b in blocks]]
    for variant, label in names.items():
        cells.append([label] + [f"{ms[(variant, b)]:.2f}" if (variant, b) in ms else "-" for b in blocks])
    return md_table(["forward, ms"] + [f"block {b}" for b in blocks], cells) + (
        f"\nWeights read at the datasheet's bandwidth: {step['weight_read_ms']:.2f} ms; weights and cache "
        f"{step['read_ms']:.2f} ms.\n"
    )


def h200_lumina() -> str:
    rows = load("gpu/h200-step/measure.json")["table"]["rows"]
    """Projected, not measured: the papers' step compressions times the random-weight forward."""
    cols = [
        "method",
        "step compression (the paper's)",
        "forwards",
        "projected s/image, eager bookkeeping",
        "projected s/image, forward only",
    ]
    cells = [
        [
            r["method"],
            x(r["step_compression"], 1),
            f"{r['forwards']:.0f}",
            f"{r['seconds_eager_step']:.1f}",
            f"{r['seconds_forward_only']:.1f}",
        ]
        for r in rows
    ]
    return md_table(cols, cells)


def h200_embedded() -> str:
    cols = ["method", "window", "step compression", "latency vs plain loop"]
    cells = [
        [r["method"], window(r), x(r["step_compression"]), x(r["latency_speedup"])]
        for r in load("gpu/h200/embedded/bench.json")["rows"]
    ]
    return md_table(cols, cells)


def compiled_cpu() -> str:
    settings = load("compiled-cpu/bench.json")["settings"]
    eager, comp = settings["threads-1"], settings["threads-1-compiled"]
    c = {(r["method"], r["window"]): r for r in comp["rows"]}
    cols = [
        "method",
        "window",
        "s/image eager",
        "s/image compiled",
        "speedup eager",
        "speedup compiled",
        "tokens = eager",
    ]
    cells = []
    for r in eager["rows"]:
        k = c.get((r["method"], r["window"]))
        cells.append(
            [
                r["method"],
                window(r),
                f"{r['wall']:.2f}",
                f"{k['wall']:.2f}" if k else "-",
                x(r["latency_speedup"]),
                x(k["latency_speedup"]) if k else "-",
                str(k.get("tokens_equal_eager")) if k else "-",
            ]
        )
    return md_table(cols, cells)


def dtype_block_cost() -> str:
    """`benchmarks/dtype/*.json`: per run, embedded model and dtype, a block's forward against a single
    token's, the lossless presets against the plain loop in the same dtype, and the fastest preset
    against the float32 plain loop (the baseline a user writes without thinking of dtypes)."""
    methods = ("scd-gs", "scd-mc", "sjd-pac")
    blocks = ("4", "16", "32", "64")
    cols = ["run", "model", "dtype", "1 token (ms)", *(f"block {b}" for b in blocks), "plain loop (s/image)"]
    cols += [*methods, "fastest (s/image)", "fastest vs float32 plain loop", "the default on this CPU"]
    cells = []
    for name in ("threads-1", "threads-2", "measure"):
        data = load(f"dtype/{name}.json")
        run = f"{data['environment']['threads']} thread(s), load {data['environment']['loadavg_before'][0]:.1f}"
        native = data["environment"].get("native_bf16")  # not recorded by the first run
        default = "bfloat16" if native else "float32" if native is False else "not recorded"
        for spec, m in data["models"].items():
            spec = "emoji" if spec == "default" else spec  # measured while `default` named the emoji model
            plain32 = m["decodes"]["float32"]["plain-ar"]["seconds_per_image"]
            for dtype, costs in m["block_seconds"].items():
                runs = m["decodes"][dtype]
                fastest = min(runs[k]["seconds_per_image"] for k in methods)
                cells.append(
                    [
                        run,
                        f"`{spec}`",
                        dtype,
                        f"{costs['1'] * 1e3:.1f}",
                        *(x(m["block_vs_single"][dtype][b]) for b in blocks),
                        f"{runs['plain-ar']['seconds_per_image']:.2f}",
                        *(x(runs[k]["speedup_vs_plain"]) for k in methods),
                        f"{fastest:.2f}",
                        x(plain32 / fastest),
                        "yes" if dtype == default else "no" if native is not None else default,
                    ]
                )
    return md_table(cols, cells)


def scale_runs() -> list[dict]:
    """`benchmarks/scale/*.json` of `measure.py` (one per checkpoint and weights), by size then name."""
    runs = [json.loads(f.read_text()) for f in sorted((BENCH / "scale").glob("*.json"))]
    return [r for r in runs if "load" in r]


def scale_name(r: dict) -> str:
    return f"`{Path(r['model'].partition(':')[2]).name}`"


def scale_load() -> str:
    """Load seconds and peak against the plan's load peak, and a forward of each block (CFG pair)."""
    blocks = ("1", "4", "16", "32", "64")
    cols = ["checkpoint", "weights", "load", "plan's load peak", "measured (/ plan)", "peak RSS"]
    cols += [f"{b} tok (s)" if b == "1" else b for b in blocks] + ["commit, load avg"]
    cells = []
    for r in scale_runs():
        ld, fw = r["load"], r["forward_ms_cfg_pair"]
        load_avg = f"{r['load_average'][0]:.1f}-{r['load_average_after'][0]:.1f}"
        cells.append(
            [
                scale_name(r),
                r["quantize"] or r["dtype"],
                f"{ld['load_s']:.0f} s",
                f"{ld['plan_load_peak_gib']:.2f} GiB",
                f"{ld['load_peak_over_before_gib']:.2f} GiB ({ld['measured_over_plan']:.3f})",
                f"{ld['rss_peak_gib']:.2f} GiB",
                *(f"{fw[b] / 1e3:.2f}" for b in blocks),
                f"`{r['git_commit']}`, load {load_avg}",
            ]
        )
    return md_table(cols, cells)


def scale_generate() -> str:
    """A whole image through `jacobigen generate` (measure.py --generate): forwards, time per forward
    and per iteration, and the command's peak memory against the plan's total."""
    cols = ["checkpoint", "method", "forwards", "step compression", "wall (s)", "per forward (ms)"]
    cols += ["other (s)", "peak over start (/ plan's total)"]
    cells = []
    for r in scale_runs():
        for g in r.get("generate", {}).values():
            st = g["stats"]
            cells.append(
                [
                    scale_name(r),
                    f"`{st['method']}`, window {st['window']}",
                    str(st["nfe"]),
                    x(st["ar_nfe"] / st["nfe"]),
                    f"{st['wall_time']:.1f}",
                    f"{st['forward_time'] / st['nfe'] * 1e3:.0f}",
                    f"{st['overhead_time']:.2f}",
                    f"{g['rss_peak_over_before_gib']:.2f} GiB "
                    f"({g['rss_peak_over_before_gib'] / g['plan_total_gib']:.2f})",
                ]
            )
    return md_table(cols, cells)


def image_decode() -> str:
    """`benchmarks/scale/image_decode.json`: one image's pixel decode per family's decoder."""
    data = load("scale/image_decode.json")
    cols = ["decoder", "release", "image", "parameters", "seconds", "peak over start", "bytes per pixel"]
    cells = [
        [
            f"`{name}`",
            f"`{d['release']}`",
            "x".join(map(str, d["pixels"])),
            f"{d['parameters'] / 1e6:.0f} M",
            f"{d['seconds']:.1f}",
            f"{d['peak_over_before_gib']:.2f} GiB",
            f"{d['bytes_per_pixel']:,}",
        ]
        for name, d in data["decoders"].items()
    ]
    return md_table(cols, cells)


PROFILE_LINE = re.compile(
    r"wall ([\d.]+) s, model forward [\d.]+ s, overhead share ([\d.]+)%, \d+ forwards, (\d+) torch ops"
    r"(?:.*?bookkeeping ([\d.]+) ms per iteration)?"
)


def profile(folder: str = "profile") -> str:
    """`benchmarks/<folder>/before.md` against `after.md` (profile_step.py's output)."""

    def read(name):
        out, method = {}, None
        for line in (BENCH / folder / name).read_text().splitlines():
            if line.startswith("### "):
                method = line[4:].strip()
            elif m := PROFILE_LINE.match(line):
                out[method] = m.groups()
        return out

    before, after = read("before.md"), read("after.md")
    booked = all(a[3] and before.get(m, (None,) * 4)[3] for m, a in after.items())
    cols = [
        "method, window",
        "overhead share before -> after",
        "torch ops per iteration outside the model",
        "wall per image",
    ] + (["bookkeeping per iteration"] if booked else [])
    cells = []
    for method, (wall, share, ops, book) in after.items():
        b = before.get(method)
        if not b:
            continue
        cells.append(
            [
                method,
                f"{b[1]}% -> {share}%",
                f"{int(b[2]):,} -> {int(ops):,}",
                f"{float(b[0]):.2f} s -> {float(wall):.2f} s",
            ]
            + ([f"{float(b[3]):.2f} ms -> {float(book):.2f} ms"] if booked else [])
        )
    return md_table(cols, cells)


def auto_default() -> str:
    """`generate` with no --method against --method ar, as a user runs them (benchmarks/auto/default_vs_ar.py)."""
    spec = importlib.util.spec_from_file_location("default_vs_ar", BENCH / "auto" / "default_vs_ar.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.report(load("auto/default_vs_ar.json")["rows"])


def auto_choice(threads: int) -> str:
    """`jacobigen bench --methods auto,...` on the embedded model: auto's row beside the fixed ones."""
    return table([Row.from_dict(r) for r in load(f"auto/threads-{threads}/bench.json")["rows"]])


def names_default() -> str:
    """`jacobigen bench` on the default, `emoji-names`, at its sampling: one and two threads side by side."""
    one, two = rows_by_key("names/threads-1/bench.json"), rows_by_key("names/threads-2/bench.json")
    cols = ["method", "window", "step compression", "forwards per image", "1 token per iteration",
            "latency, 1 thread", "latency, 2 threads"]  # fmt: skip
    cells = [
        [f"`{m}`", str(w), x(r["step_compression"]), f"{r['nfe']:.1f}", pct(r["single_token_share"]),
         x(r["latency_speedup"]), x(two[(m, w)]["latency_speedup"])]
        for (m, w), r in one.items()
    ]  # fmt: skip
    base = [load(f"names/threads-{n}/bench.json")["baseline"] for n in (1, 2)]
    note = ", ".join(f"{n} thread{'s' * (n > 1)}: {b['wall']} {b['wall_seconds']:.2f} s per image"
                     for n, b in zip((1, 2), base, strict=True))  # fmt: skip
    return md_table(cols, cells) + f"\nLatency is against the faster of `ar` and the plain loop ({note}).\n"


SAME_AS_AR = {"emoji": "emoji", "emoji-names": "names", "emoji-names-video": "video-names"}
ALIASES = {"scd-mc+pac": "sjd-pac", "sjd+vp": "sjd-vp"}  # a preset's parts without the verifier -> its name


def same_as_ar_price() -> str:
    """`benchmarks/same-as-ar/*/bench.json`: each lossless preset as the papers verify it (rejection
    sampling) and with the invariant verifier (`--same-as-ar`), step compression and latency against
    the fastest baseline, side by side (issue 68's price table)."""
    cols = ["model (dtype, images per row)", "preset", "window", "step compression: papers", "`--same-as-ar`",
            "change", "latency: papers", "`--same-as-ar`"]  # fmt: skip
    cells = []
    for model, folder in SAME_AS_AR.items():
        d = load(f"same-as-ar/{folder}/bench.json")
        rows = {(r["method"], r["window"]): r for r in d["rows"]}
        label = f"`{model}` ({d.get('dtype', 'float32')}, {len(d['prompts']) * d['seeds']})"
        for (method, w), inv in rows.items():
            if not method.endswith("+invariant"):
                continue
            base = method.removesuffix("+invariant")
            mrs = rows.get((ALIASES.get(base, base), w))
            if mrs is None:
                continue
            change = inv["step_compression"] / mrs["step_compression"] - 1
            cells.append([label, f"`{ALIASES.get(base, base)}`", str(w), x(mrs["step_compression"]),
                          x(inv["step_compression"]), f"{100 * change:+.0f}%", x(mrs["latency_speedup"]),
                          x(inv["latency_speedup"])])  # fmt: skip
    return md_table(cols, cells) + "\nLatency is against the fastest of `ar` and the plain loops, one thread.\n"


def same_as_ar_equality() -> str:
    """`benchmarks/same-as-ar/equality.json`: how often `--same-as-ar` left `ar`'s tokens, by dtype and mode."""
    d = load("same-as-ar/equality.json")
    cols = ["dtype", "mode", "preset", "window", "images differing", "first differences per 10^5 tokens",
            "step compression", "seconds (preset / `ar`)"]  # fmt: skip
    cells = [
        [r["dtype"], "deterministic" if r["deterministic"] else "default", f"`{r['method']}`", str(r["window"]),
         f"{r['images_differing']} of {r['images']}", f"{r['first_differences_per_1e5_tokens']:.0f}",
         x(r["step_compression"]), f"{r['seconds']:.0f} / {r['ar_seconds']:.0f}"]
        for r in d["rows"]
    ]  # fmt: skip
    return md_table(cols, cells)


def deterministic_price() -> str:
    """`benchmarks/same-as-ar/deterministic-*/throughput.json`: images/s in deterministic mode against the
    shared forward, per dtype, method and batch size (the price of the mode `--same-as-ar` turns on)."""
    cols = ["dtype", "method", "batch", "images/s: shared", "deterministic", "ratio"]
    cells = []
    for dtype in ("float32", "bfloat16"):
        rows = load(f"same-as-ar/deterministic-{dtype}/throughput.json")["rows"]
        by = {(r["method"], r["batch_size"], r["mode"]): r["images_per_second"] for r in rows}
        for (method, batch, mode), shared in by.items():
            if mode == "shared" and (method, batch, "deterministic") in by:
                det = by[(method, batch, "deterministic")]
                cells.append([dtype, f"`{method}`", str(batch), f"{shared:.2f}", f"{det:.2f}", x(det / shared)])
    return md_table(cols, cells)


TABLES = {
    "same-as-ar-price": same_as_ar_price,
    "deterministic-price": deterministic_price,
    "same-as-ar-equality": same_as_ar_equality,
    "every-method": every_method,
    "auto-1": lambda: auto_choice(1),
    "auto-2": lambda: auto_choice(2),
    "tree": tree,
    "quality": quality,
    "lossy": lossy,
    "throughput": throughput,
    "throughput-lean-step": lambda: throughput("lean-step"),
    "video-models": video_models,
    "video-names": video_names,
    "h200-forward": h200_forward,
    "h200-lumina": h200_lumina,
    "h200-embedded": h200_embedded,
    "compiled-cpu": compiled_cpu,
    "dtype-block-cost": dtype_block_cost,
    "scale-load": scale_load,
    "scale-generate": scale_generate,
    "image-decode": image_decode,
    "auto-default": auto_default,
    "names-default": names_default,
    "profile": profile,
    "profile-lean-step": lambda: profile("profile/lean-step"),
    "profile-narrow-tables": lambda: profile("profile/narrow-tables"),
    "profile-narrow-tables-bf16": lambda: profile("profile/narrow-tables/bf16"),
}


def headline() -> str:
    """README's one table: the lossless presets on both embedded image models (2-core CPU, one and two
    threads): the default, `emoji-names`, beside the varied `emoji` model, the harder case."""
    # (a run before --dtype existed ran float32)
    files = {"emoji-names": "names/threads-{}/bench.json", "emoji": "tree/threads-{}/bench.json"}
    runs = {
        f"{model} ({load(f.format(1)).get('dtype', 'float32')})": (rows_by_key(f.format(1)), rows_by_key(f.format(2)))
        for model, f in files.items()
    }
    cols = ["method (lossless)", "window"]
    for what in ("step compression", "latency, 1 thread", "latency, 2 threads"):
        cols += [f"{what}: `{model.split()[0]}` {model.split()[1]}" for model in runs]
    cells = [
        [f"`{method}`", str(w)]
        + [x(one[(method, w)]["step_compression"]) for one, _ in runs.values()]
        + [x(one[(method, w)]["latency_speedup"]) for one, _ in runs.values()]
        + [x(two[(method, w)]["latency_speedup"]) for _, two in runs.values()]
        for method in ("scd-mc", "scd-gs", "sjd-pac")
        for w in (16, 32, 64)
    ]
    return md_table(cols, cells)


# --- assembling -------------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"^<!-- table: ([\w-]+) -->$", re.M)
GENERATED = (
    "<!-- Generated by docs/gen_results.py from benchmarks/*/*.json: edit docs/results.in.md "
    "and rerun it, never this file. -->\n"
)


def render_results() -> str:
    template = TEMPLATE.read_text()
    return GENERATED + PLACEHOLDER.sub(lambda m: TABLES[m.group(1)]().rstrip("\n"), template)


def render_readme(text: str) -> str:
    start, end = text.index(HEAD_START) + len(HEAD_START), text.index(HEAD_END)
    return text[:start] + "\n" + headline() + text[end:]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, new in ((RESULTS, render_results()), (README, render_readme(README.read_text()))):
        if path.exists() and path.read_text() == new:
            continue
        stale.append(path.relative_to(ROOT))
        if not check:
            path.write_text(new)
    if check and stale:
        print(f"stale: {', '.join(map(str, stale))}: run python docs/gen_results.py", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
