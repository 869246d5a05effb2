"""Benchmark figures (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402


def _legend(ax, **kwargs) -> None:
    """A legend where the axes hold labelled artists (matplotlib warns about an empty one)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def plot_fid_vs_speed(
    panels: dict[str, list[tuple[str, float, float, bool]]], noise: float, title: str, path: Path
) -> None:
    """FID vs ar (y) against speed figures (x, one panel per figure name) for (label, speed, fid,
    lossless) points, with the ar-vs-ar noise level as a horizontal line."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), sharey=True, squeeze=False)
    for ax, (xlabel, points) in zip(axes[0], panels.items(), strict=True):
        for lossless, style in [
            (True, dict(marker="o", color="tab:blue", label="lossless")),
            (False, dict(marker="x", color="tab:red", label="lossy")),
        ]:
            sel = [p for p in points if p[3] == lossless]
            if sel:
                ax.scatter([p[1] for p in sel], [p[2] for p in sel], **style)
            for label, x, y, _ in sel:
                ax.annotate(label, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.axhline(noise, color="grey", ls="--", lw=1, label=f"ar vs ar, other seeds ({noise:.1f})")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("FID vs ar")
        ax.set_ylim(bottom=0)
        _legend(ax, fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_bench(rows, cost_curve: dict | None, out_dir: Path, fid: dict | None = None) -> None:
    fixed = [r for r in rows if not r.auto and not r.baseline]
    methods = list(dict.fromkeys(r.method for r in fixed))
    windows = sorted({r.window for r in fixed})

    panels = [
        ("step_compression", "step compression (ar's NFE / NFE)"),
        ("latency_speedup", "latency speedup vs faster of ar, plain-ar"),
        ("cpu_speedup", "CPU-time speedup vs faster of ar, plain-ar"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4))
    width = 0.8 / max(len(windows), 1)
    for i, w in enumerate(windows):
        sel = {r.method: r for r in fixed if r.window == w}
        xs = [j + i * width for j in range(len(methods))]
        for ax, (attr, _) in zip(axes, panels, strict=True):
            ax.bar(xs, [getattr(sel[m], attr) if m in sel else 0 for m in methods], width, label=f"window {w}")
    for ax, (_, title) in zip(axes, panels, strict=True):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(methods))], methods, rotation=45, ha="right")
        ax.axhline(1, color="grey", lw=0.8)
        ax.set_title(title)
        _legend(ax)
    fig.tight_layout()
    fig.savefig(out_dir / "speedup.png", dpi=120)
    plt.close(fig)

    biggest = [r for r in fixed if r.window == max(windows)] if windows else []
    if biggest:
        fig, axes = plt.subplots(1, len(biggest), figsize=(3 * len(biggest), 3), sharey=True, squeeze=False)
        for ax, r in zip(axes[0], biggest, strict=True):
            total = sum(r.histogram.values())
            ks = sorted(int(k) for k in r.histogram)
            ax.bar(ks, [r.histogram[k] / total for k in ks])
            ax.set_title(f"{r.method}\n1-token: {100 * r.single_token_share:.0f}%", fontsize=9)
            ax.set_xlabel("tokens / iteration")
        fig.suptitle(f"tokens committed per iteration (window {max(windows)})")
        fig.tight_layout()
        fig.savefig(out_dir / "tokens_per_iteration.png", dpi=120)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for m in methods:
        pts = sorted((r.window, r.step_compression) for r in fixed if r.method == m)
        ax.plot(*zip(*pts, strict=True), marker="o", label=m)
    ax.set_xlabel("window")
    ax.set_ylabel("step compression")
    _legend(ax, fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "compression_vs_window.png", dpi=120)
    plt.close(fig)

    plot_tokens_vs_nodes([r for r in rows if not r.baseline], out_dir / "tokens_vs_nodes.png")
    best = {}
    for r in fixed:  # one map per method: at its best step compression
        if r.acceptance and (r.method not in best or r.step_compression > best[r.method].step_compression):
            best[r.method] = r
    if best:
        plot_acceptance(
            [torch.tensor(r.acceptance) for r in best.values()],
            [f"{r.method}, window {r.window}" for r in best.values()],
            out_dir / "acceptance.png",
        )

    if cost_curve:
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = sorted(cost_curve)
        base = cost_curve[xs[0]]
        ax.plot(xs, [cost_curve[x] / base for x in xs], marker="o")
        ax.set_xlabel("tokens in one forward")
        ax.set_ylabel("cost / single-token forward")
        ax.set_title("forward cost on this device")
        fig.tight_layout()
        fig.savefig(out_dir / "cost_curve.png", dpi=120)
        plt.close(fig)

    if fid:
        panels = {
            label: [
                (f"{r.method} {'auto ' if r.auto else ''}{r.window}", getattr(r, attr), r.fid_vs_ar, r.lossless)
                for r in rows
                if not r.baseline
            ]
            for attr, label in [
                ("latency_speedup", "latency speedup vs baseline"),
                ("step_compression", "step compression vs ar"),
            ]
        }
        plot_fid_vs_speed(
            panels, fid["ar_vs_ar"], f"FID vs ar over {fid['images']} images per row", out_dir / "fid_vs_speed.png"
        )


def plot_throughput(rows: list[dict], path: Path) -> None:
    """Images per second against batch size, one line per method and forward mode (solid: shared,
    dashed: deterministic, dotted: per-sequence)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    styles = {"shared": "-", "deterministic": "--", "per-sequence": ":"}
    for m, mode in dict.fromkeys((r["method"], r.get("mode", "shared")) for r in rows):
        pts = sorted(
            (r["batch_size"], r["images_per_second"])
            for r in rows
            if (r["method"], r.get("mode", "shared")) == (m, mode)
        )
        label = m if mode == "shared" else f"{m} ({mode})"
        ax.plot(*zip(*pts, strict=True), marker="o", linestyle=styles.get(mode, "-"), label=label)
    _save_log2(fig, ax, "batch size (images decoded together)", "images / s", path)


def plot_tokens_vs_nodes(rows, path: Path) -> None:
    """Tokens committed per iteration against block nodes evaluated per iteration, one line per
    method (or method variant) over its windows: how much each evaluated node pays."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for m in dict.fromkeys(r.method for r in rows):
        pts = sorted((r.nodes, r.tokens_per_iteration, r.window) for r in rows if r.method == m and not r.auto)
        if not pts:
            continue
        (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=m)
        for x, y, w in pts:
            ax.annotate(str(w), (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points", color=line.get_color())
    _save_log2(fig, ax, "block nodes evaluated per iteration (labels: window)", "tokens committed per iteration", path)


def _save_log2(fig, ax, xlabel: str, ylabel: str, path: Path) -> None:
    """Finish a one-panel line plot over a log2 x axis and write it."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _legend(ax, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_acceptance(grids, titles: list[str], path: Path) -> None:
    """Acceptance maps, one column per image: which iteration committed each token (0: the
    prefill), how many tokens that iteration committed with it (bright: long accepted runs, dark:
    one token, AR's pace), and the tokens per iteration."""
    n = len(grids)
    aspect = max(g.shape[-1] / g.shape[-2] for g in grids)  # a clip's frames side by side are wide
    width = 3.2 * min(max(aspect, 1.0), 5.0)
    width = min(width, max(3.2, 24 / n))  # several clips side by side stay within ~24 inches
    rows = max(width / aspect, 1.0) + 0.6  # the map's height, plus its title
    fig, axes = plt.subplots(
        3, n, figsize=(width * n, 2 * rows + 1.4), squeeze=False, gridspec_kw={"height_ratios": [rows, rows, 1.2]}
    )
    for (first, runs, strip), grid, title in zip(axes.T, grids, titles, strict=True):
        grid = grid.cpu()
        per_iteration = grid.flatten().bincount()
        for ax, values, label, cmap in [
            (first, grid, "iteration", "viridis"),
            (runs, per_iteration[grid], "tokens committed together", "magma"),
        ]:
            im = ax.imshow(values.numpy(), cmap=cmap, interpolation="nearest")
            ax.set_xticks([]), ax.set_yticks([])
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).set_label(label, fontsize=7)
        first.set_title(title, fontsize=8)
        strip.bar(range(1, len(per_iteration)), per_iteration[1:].numpy(), width=1.0, color="tab:blue")
        strip.set_xlabel("iteration", fontsize=7)
        strip.set_ylabel("tokens", fontsize=7)
        strip.tick_params(labelsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_analysis(results: dict, model: str, out: Path) -> None:
    """One figure per measurement of :func:`jacobigen.tools.analyze.run_all`."""
    alpha = results["alpha"]
    methods = list(dict.fromkeys(r["method"] for r in alpha))
    fig, (ax_nfe, ax_ham) = plt.subplots(1, 2, figsize=(10, 4))
    for m in methods:
        rows = [r for r in alpha if r["method"] == m]
        ax_nfe.plot([r["alpha"] for r in rows], [r["nfe"] for r in rows], "o-", label=m)
        ax_ham.plot([r["alpha"] for r in rows], [r["hamming"][0] for r in rows], "o-", label=m)
    ax_nfe.set(xlabel="coupling strength alpha (0: independent drafts)", ylabel="forward passes per image")
    ax_ham.set(xlabel="coupling strength alpha", ylabel="drafts changed between iterations")
    for ax in (ax_nfe, ax_ham):
        _legend(ax, fontsize=8)
    _finish(fig, f"Coupling-strength sweep ({model})", out / "alpha.png")

    full = {r["method"]: r["hamming"] for r in alpha if r["alpha"] == 1.0}
    fig, ax = plt.subplots(figsize=(5.5, 4))
    steps = range(1, 1 + max(len(h) for h in full.values()))
    for i, (m, h) in enumerate(full.items()):
        ax.bar([s + 0.35 * (i - 0.5) for s in steps], [x or 0 for x in h], width=0.35, label=m)
    ax.set(xlabel="iterations apart", ylabel="drafts changed", xticks=list(steps))
    _legend(ax, fontsize=8)
    _finish(fig, f"Multi-step Hamming distance at alpha = 1 ({model})", out / "hamming.png")

    cfg = results["cfg"]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for m in dict.fromkeys(r["method"] for r in cfg):
        rows = [r for r in cfg if r["method"] == m]
        ax.plot([r["cfg"] for r in rows], [r["step_compression"] for r in rows], "o-", label=m)
    ax.set(xlabel="guidance scale", ylabel="step compression (AR passes / passes)")
    _legend(ax, fontsize=8)
    _finish(fig, f"Guidance sweep ({model})", out / "cfg.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, h in results["accepted"].items():
        total = sum(h["histogram"].values())
        ks = sorted(h["histogram"])
        ax.plot(
            ks,
            [h["histogram"][k] / total for k in ks],
            "o-",
            ms=3,
            label=f"{m} ({h['single_token_share']:.0%} commit one)",
        )
    ax.set(xlabel="tokens committed in an iteration", ylabel="share of iterations", yscale="log")
    _legend(ax, fontsize=8)
    _finish(fig, f"Accepted lengths ({model})", out / "accepted.png")

    inf = results["influence"]
    fig, (ax_d, ax_o) = plt.subplots(1, 2, figsize=(10, 4))
    ax_d.plot(inf["distance"], inf["tv_by_distance"], "-")
    ax_d.set(xlabel="image tokens after the changed one", ylabel="TV of the target", xscale="log")
    ax_o.bar(inf["column_offset"], inf["tv_by_column_offset"], width=0.9)
    ax_o.set(xlabel="changed token (row above): columns right of the target", ylabel="TV of the target")
    _finish(fig, f"Locality and row dependency ({model})", out / "influence.png")


def _finish(fig, title: str, path: Path) -> None:
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
