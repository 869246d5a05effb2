"""The bench's reports: markdown tables (one setting, or settings side by side), bench.json and
the figures."""

from __future__ import annotations

import json
from pathlib import Path

from . import extras
from .bench_rows import PLAIN, SHARED, Row
from .threads import environment_line


def fid_note(fid: dict) -> str:
    """The line under a table with FID columns: sample size and the ar-vs-ar noise level."""
    line = (
        f"FID over {fid['images']} images per row ({fid['prompts']}). Noise level: ar vs ar on other "
        f"seeds = {fid['ar_vs_ar']:.1f}"
    )
    if fid["ar_vs_data"] is not None:
        line += f"; ar vs data = {fid['ar_vs_data']:.1f} and {fid['ar_reference_vs_data']:.1f} for the two seed sets"
    return line + ".\n"


def fid_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def md_table(cols: list[str], cells: list[list[str]]) -> str:
    lines = [cols, ["---"] * len(cols), *cells]
    return "".join(f"| {' | '.join(line)} |\n" for line in lines)


def pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def header(extra: dict) -> str:
    """Lines above a table: the machine, warm-up (compilation) and the baselines."""
    lines = [environment_line(extra)] if "threads" in extra else []
    if "compile" in extra:
        c = extra["compile"]
        eager = (
            f", {c['eager_frames']} frame(s) left eager ({'; '.join(c['eager_reasons'])})"
            if c.get("eager_frames")
            else ""
        )
        lines.append(
            f"Decode step {c['mode']}: {c['graphs']} graph(s), {c['graph_breaks']} graph "
            f"break(s){eager}; warm-up including compilation {extra['warmup_seconds']:.1f} s.\n"
        )
    elif "warmup_seconds" in extra:
        lines.append(f"Eager model forward; warm-up {extra['warmup_seconds']:.1f} s.\n")
    if "auto_method" in extra:
        a = extra["auto_method"]
        lines.append(
            f"`--method auto` chose {a['method']} at window {a['window']} here (predicted "
            f"{a['predicted_speedup_vs_ar']:.2f}x ar's speed; its row is marked auto).\n"
        )
    for name, why in extra.get("skipped", {}).items():
        lines.append(f"Skipped {name}: {why}.\n")
    for name, why in extra.get("compile_errors", {}).items():
        lines.append(f"Not compiled, not timed: {name}: {why}.\n")
    if "baseline" in extra:
        b = extra["baseline"]
        names = b["wall"] if b["wall"] == b["cpu"] else f"{b['wall']} (wall time) and {b['cpu']} (CPU time)"
        lines.append(
            f"Speedups against {names}, the fastest of ar and the plain loops ({b['wall_seconds']:.2f} s/image "
            f"wall, {b['cpu_seconds']:.2f} s/image CPU); ar takes {b['ar_over_plain_wall']:.2f}x the plain "
            f"loop's wall time and {b['ar_over_plain_cpu']:.2f}x its CPU time.\n"
        )
    return "\n".join(lines) + ("\n" if lines else "")


def markdown(rows: list[Row], extra: dict | None = None) -> str:
    """The machine and baselines, then the table (with FID columns when ``extra`` holds FID)."""
    extra = extra or {}
    fid = extra.get("fid")
    return header(extra) + table(rows, bool(fid)) + ("\n" + fid_note(fid) if fid else "")


def table(rows: list[Row], fid: bool = False) -> str:
    """One row per (method, window): every figure the bench measures (graph columns when compiled)."""
    cols = [
        "method",
        "window",
        "lossless",
        "NFE/image",
        "step compression",
        "latency speedup",
        "CPU-time speedup",
        "1-token iterations",
        "overhead share",
        "bookkeeping ms/iter",
        "nodes/iter",
        "tokens/node",
        "sibling tokens/image",
    ] + (["FID vs ar", "FID vs data"] if fid else [])
    compiled = any(r.graphs is not None for r in rows)
    cols += ["graphs", "recompiles", "graph breaks", "tokens = eager"] if compiled else []
    cells = [
        [
            r.method,
            f"{'auto: ' if r.auto else ''}{r.window}",
            "yes" if r.lossless else "no",
            f"{r.nfe:.1f}",
            f"{r.step_compression:.2f}x",
            f"{r.latency_speedup:.2f}x",
            f"{r.cpu_speedup:.2f}x",
            pct(r.single_token_share),
            pct(r.overhead_share),
            "-" if r.bookkeeping_ms is None else f"{r.bookkeeping_ms:.2f}",
            f"{r.nodes:.1f}",
            f"{r.tokens_per_node:.3f}",
            f"{r.sibling_tokens:.1f}",
        ]
        + ([fid_cell(r.fid_vs_ar), fid_cell(r.fid_vs_data)] if fid else [])
        + ([str(r.graphs), str(r.recompiles), str(r.graph_breaks), str(r.tokens_equal_eager)] if compiled else [])
        for r in rows
    ]
    for r, row in zip(rows, cells, strict=True):
        if not r.runs:  # not compiled, not timed (the reason is above the table)
            row[3:] = ["-"] * (len(row) - 3)
    return md_table(cols, cells)


def summary_markdown(results: dict[str, tuple[list[Row], dict]]) -> str:
    """Settings side by side (threads, eager or compiled): seconds per image and latency speedup,
    each against its own setting's baselines; then every setting's full table."""
    labels = list(results)
    index = {
        label: {(r.method, r.auto, 0 if r.auto else r.window): r for r in rows} for label, (rows, _) in results.items()
    }
    keys = list(dict.fromkeys(k for label in labels for k in index[label]))
    cols = ["method", "window", "lossless"] + [
        f"{c} ({label})" for label in labels for c in ("s/image", "latency speedup")
    ]
    cells = []
    for key in keys:
        got = [index[label].get(key) for label in labels]
        r = next(g for g in got if g)
        window = "auto: " + "/".join(str(g.window) if g else "-" for g in got) if r.auto else str(r.window)
        cells.append(
            [r.method, window, "yes" if r.lossless else "no"]
            + [x for g in got for x in ((f"{g.wall:.2f}", f"{g.latency_speedup:.2f}x") if g and g.runs else ("-", "-"))]
        )
    sections = [f"## {label}\n\n{markdown(rows, extra)}" for label, (rows, extra) in results.items()]
    return md_table(cols, cells) + "\n" + "\n".join(sections)


def report_data(rows: list[Row], extra: dict, meta: dict) -> dict:
    return {**meta, **extra, "rows": [r.as_dict() for r in rows]}


def write_report(rows: list[Row], extra: dict, out_dir: Path, meta: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps(report_data(rows, extra, meta), indent=2))
    (out_dir / "bench.md").write_text(markdown(rows, extra))
    if plots := extras.plots_or_warn():
        plots.plot_bench(rows, extra.get("cost_curve"), out_dir, extra.get("fid"))


def write_reports(results: dict[str, tuple[list[Row], dict]], out_dir: Path, meta: dict) -> str:
    """One setting: its report in ``out_dir``. Several: one report per setting in
    ``out_dir/<label>/``, and in ``out_dir`` the side-by-side summary (bench.md) and every setting's
    data (bench.json). Returns the markdown written to ``out_dir/bench.md``."""
    if len(results) == 1:
        ((rows, extra),) = results.values()
        write_report(rows, extra, out_dir, meta)
        return markdown(rows, extra)
    for label, (rows, extra) in results.items():
        write_report(rows, extra, out_dir / label, meta)
    text = summary_markdown(results)
    (out_dir / "bench.md").write_text(text)
    (out_dir / "bench.json").write_text(
        json.dumps(
            {"settings": {label: report_data(rows, extra, meta) for label, (rows, extra) in results.items()}}, indent=2
        )
    )
    return text


def throughput_table(rows: list[dict], info: dict | None = None) -> str:
    """The rows as a table; "vs one at a time" is images/s over the same method and mode at batch
    1, "vs baseline" over the faster of shared ar and the plain loop at the same batch size."""
    base: dict = {}
    for r in rows:
        if r["method"] in ("ar", PLAIN) and r.get("mode", SHARED) == SHARED:
            base[r["batch_size"]] = max(base.get(r["batch_size"], 0.0), r["images_per_second"])
    alone = {(r["method"], r.get("mode")): r["images_per_second"] for r in rows if r["batch_size"] == 1}
    head = (
        (environment_line(info) + "\n" if info else "")
        + "| method | forward | batch | images/s | vs one at a time | vs baseline | image tokens/s | forward passes "
        "| step compression | overhead |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "".join(
        f"| {r['method']} | {r.get('mode', SHARED)} | {r['batch_size']} | {r['images_per_second']:.2f} | "
        f"{_ratio(r['images_per_second'], alone.get((r['method'], r.get('mode'))))} | "
        f"{_ratio(r['images_per_second'], base.get(r['batch_size']))} | {r['tokens_per_second']:.0f} | "
        f"{r['forward_passes']} | {r['step_compression']:.2f}x | {pct(r['overhead_share'])} |\n"
        for r in rows
    )


def _ratio(x: float, base: float | None) -> str:
    return f"{x / base:.2f}x" if base else "-"
