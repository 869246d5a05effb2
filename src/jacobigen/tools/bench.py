"""Side-by-side benchmark: every method on the same prompts and seeds, interleaved, in one process.

Two baselines run beside the methods: ``ar`` (the engine at window 1) and ``plain-ar``, the plain
KV-cache loop a user would write (:mod:`jacobigen.tools.plain_ar`). Latency figures are against the faster
of the two, so engine overhead cannot flatter the methods; ``ar``'s time over the plain loop's is
reported beside them. Per method and window: forward passes per image, step compression (``ar``'s
forward passes over the method's), speedups in wall time and in CPU time (``process_time`` adds up
every thread, so threads that spin show), the tokens-per-iteration histogram (and the share of
iterations that commit a single token), and the share of wall time spent outside the model forward.
Times cover token generation only, not the VQ decoder (the same for every row).
With ``fid``: FID of each row's images against ``ar``'s on other seeds and against held-out data.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from ..core.checks import image_seeds
from ..core.contract import model_device, sync
from ..core.errors import ConfigError, JacobigenError
from ..core.stats import step_compression
from ..decode.api import generate
from ..decode.capture import Graphed, compile_counts
from ..decode.methods import parse_variant
from ..models.bundle import ModelBundle, encode_one
from . import extras
from .costs import block_size, forward_cost_curve, predicted_seconds_per_image
from .fid import features, frechet_distance
from .plain_ar import plain_ar
from .threads import choose_threads, environment, environment_line, loadavg

PLAIN = "plain-ar"
BASELINES = ("ar", PLAIN)


@dataclass
class Row:
    method: str
    window: int
    lossless: bool
    auto: bool = False  # window chosen from the device's cost curve
    runs: int = 0
    nfe: float = 0.0  # forward passes per image (mean)
    wall: float = 0.0  # wall seconds per image (mean, perf_counter around the call)
    cpu: float = 0.0  # CPU seconds per image, all threads (mean, process_time around the call)
    forward: float | None = 0.0  # seconds in the model forward per image (None: not measured)
    histogram: dict = field(default_factory=dict)
    nodes: float = 0.0  # block nodes per iteration (mean)
    sibling_tokens: float = 0.0  # tokens per image committed from off-spine tree nodes (mean)
    step_compression: float = 0.0
    latency_speedup: float = 0.0  # wall time, against the faster baseline
    cpu_speedup: float = 0.0  # CPU time, against the baseline with less CPU time
    latency_speedup_vs_ar: float = 0.0  # wall time, against ar
    fid_vs_ar: float | None = None  # against ar's images on other seeds (ar's own row: the noise)
    fid_vs_data: float | None = None  # against the model's held-out images
    acceptance: list | None = None  # the first image's acceptance map: iteration of each token [rows][frames * cols]
    # a compiled step (--compile): graphs its first image compiled, graphs compiled after it (0 when
    # every later image reuses them), graph breaks, and whether its first image's tokens equal eager's
    graphs: int | None = None
    recompiles: int | None = None
    graph_breaks: int | None = None
    tokens_equal_eager: bool | None = None
    compile_error: str | None = None  # why this row's step did not compile (the row is then not timed)

    @property
    def baseline(self) -> bool:
        return self.method in BASELINES

    @property
    def single_token_share(self) -> float:
        total = sum(self.histogram.values())
        return self.histogram.get(1, 0) / total if total else 0.0

    @property
    def tokens_per_iteration(self) -> float:
        total = sum(self.histogram.values())
        return sum(k * v for k, v in self.histogram.items()) / total if total else 0.0

    @property
    def tokens_per_node(self) -> float:
        """Committed tokens per evaluated block node."""
        return self.tokens_per_iteration / self.nodes if self.nodes else 0.0

    @property
    def overhead_share(self) -> float | None:
        return None if self.forward is None or not self.wall else 1 - self.forward / self.wall

    def add(self, run: Run) -> None:
        n = self.runs

        def mean(old, new):
            return (old * n + new) / (n + 1)

        self.nfe, self.wall, self.cpu = mean(self.nfe, run.nfe), mean(self.wall, run.wall), mean(self.cpu, run.cpu)
        self.nodes, self.sibling_tokens = mean(self.nodes, run.nodes), mean(self.sibling_tokens, run.sibling_tokens)
        self.forward = None if run.forward is None or self.forward is None else mean(self.forward, run.forward)
        for k, v in run.histogram.items():
            self.histogram[k] = self.histogram.get(k, 0) + v
        if self.acceptance is None and run.acceptance is not None:
            self.acceptance = run.acceptance
        self.runs = n + 1

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "single_token_share": self.single_token_share,
            "overhead_share": self.overhead_share,
            "tokens_per_iteration": self.tokens_per_iteration,
            "tokens_per_node": self.tokens_per_node,
        }


@dataclass
class Run:
    """One image's decode: forward passes, wall and CPU seconds, forward seconds, histogram, block
    nodes per iteration and tokens committed from off-spine tree nodes."""

    nfe: int
    wall: float
    cpu: float
    forward: float | None
    histogram: dict
    nodes: float
    sibling_tokens: int
    acceptance: list | None = None  # iteration that committed each token [rows][frames * cols]
    tokens: torch.Tensor | None = field(default=None, repr=False)  # the generated tokens


def plain_options(pipe: ModelBundle, sampling: dict) -> dict:
    """The sampling options the plain loop takes (the model's defaults under ``sampling``)."""
    opts = {k: v for k, v in {**pipe.defaults, **sampling}.items() if v is not None}
    if set(opts) - {"cfg", "temperature", "top_k", "top_p"}:
        raise ConfigError(f"the {PLAIN} baseline takes cfg, temperature, top_k and top_p only, got {sorted(opts)}")
    return opts


def decode_one(
    pipe: ModelBundle, method: str, window: int, prompt: str, seed: int, compile: bool | str = False, **sampling
) -> Run:
    """Generate one image's tokens with ``method`` (a preset or ``NAME[key=value,...]``, or the plain
    loop), timed on the wall clock and the process CPU clock with the device synchronised at both ends.
    ``compile``: the step as one compiled graph (the plain loop: its forward compiled, and replayed
    as a CUDA graph on a GPU).

    The plain loop's forward passes are counted, not measured: one prefill (which gives the first
    token) and one per further token, ``layout.length`` in all, the same count as ``ar``'s, so its
    step compression is 1; every iteration commits one token."""
    opts = plain_options(pipe, sampling) if method == PLAIN else {**pipe.defaults, **sampling}
    model, tokens, uncond = encode_one(pipe, prompt)
    device = model_device(model)
    sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    if method == PLAIN:
        out = plain_ar(graphed(model, compile) if compile else model, pipe.layout, tokens, uncond, seed=seed, **opts)
        stats = None
    else:
        v = parse_variant(method)
        gen = generate(
            model,
            tokens,
            layout=pipe.layout,
            uncond=uncond,
            method=v.method.name,
            window=v.window or window,
            seed=seed,
            timing=True,
            latents=pipe.latents,
            compile=compile,
            **v.options,
            **opts,
        )
        stats, out = gen.stats, gen.tokens[0]
    sync(device)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if stats is None:
        n = pipe.layout.length
        return Run(n, wall, cpu, None, {1: n - 1}, 1.0, 0, tokens=out)
    return Run(
        stats.nfe,
        wall,
        cpu,
        stats.forward_time,
        stats.histogram(),
        stats.nodes_per_iteration,
        sum(stats.sibling_tokens),
        pipe.layout.tiled(stats.when)[0].tolist(),
        out,
    )


_GRAPHED: dict = {}


def graphed(model, compile: bool | str) -> Graphed:
    """One compiled, graph-replayed forward per (model, backend) for the plain loop's timed runs. Each
    run still captures its own graphs on a GPU: the loop allocates a new cache per image."""
    key = (id(model), compile)
    if key not in _GRAPHED or _GRAPHED[key].model is not model:
        _GRAPHED.clear()  # only the model being benched is held
        _GRAPHED[key] = Graphed(model, compile)
    return _GRAPHED[key]


CANDIDATE_WINDOWS = [4, 8, 16, 32, 64]


def unbuildable(variant, window: int) -> str | None:
    """Why the variant's parts do not build at this window (None: they do)."""
    try:
        variant.build(window)
    except ConfigError as e:
        return str(e)
    return None


def choose_window(
    pipe: ModelBundle, variant, prompt: str, seed: int, curve: dict[int, float], **sampling
) -> tuple[int, dict[int, float]]:
    """Pilot the method at each candidate window and pick the one with the lowest predicted
    time per image on this device: NFE(window) x forward cost(block size(window))."""
    predicted = {}
    for w in [w for w in CANDIDATE_WINDOWS if unbuildable(variant, w) is None]:
        run = decode_one(pipe, variant.label, w, prompt, seed, **sampling)
        block = block_size(variant.build(w), pipe.layout)
        predicted[w] = predicted_seconds_per_image(run.nfe, block, curve)
    return min(predicted, key=predicted.get), predicted


def run_bench(
    pipe: ModelBundle,
    methods: list[str],
    windows: list,
    prompts: list[str],
    seeds: list[int],
    progress: bool = True,
    warmup: bool = True,
    model_spec: str | None = None,
    compile: bool | str = False,
    **sampling,
) -> tuple[list[Row], dict]:
    """Run ``ar``, the plain loop and every (method, window) on every (prompt, seed), interleaved so
    drift hits all alike, after one untimed warm-up run of each (kernels, tables, compilation).

    ``windows`` may contain "auto": the window is then chosen per method from the device's
    forward cost curve (measured here) and a pilot run. Returns the rows and the other data:
    baselines, warm-up time, cost curve, and the machine, code and weights
    (:func:`~jacobigen.tools.threads.environment`, given the ``--model`` spec ``model_spec``) with the load
    average before and after.

    ``compile`` runs every row (baselines included) with its step compiled (:func:`compiled_warmup`).
    """
    extra: dict = environment(pipe.model, model_spec)
    specs = [parse_variant(m) for m in dict.fromkeys(["ar", *methods]) if m != PLAIN]
    fixed = [w for w in windows if w != "auto"]
    configs = [("ar", 1, False, True), (PLAIN, 1, False, True)]
    configs += [(s.label, s.window, False, s.method.lossless) for s in specs[1:] if s.window]
    # a (method, window) that cannot be built (a full tree in too small a window) is skipped, with the reason
    why = {(s.label, w): unbuildable(s, w) for s in specs if not s.window for w in fixed}
    extra["skipped"] = {f"{label} @ {w}": reason for (label, w), reason in why.items() if reason}
    configs += [
        (s.label, w, False, s.method.lossless) for s in specs if not s.window for w in fixed if not why[s.label, w]
    ]
    if "auto" in windows:
        sizes = sorted(
            {1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160}
            | {
                block_size(s.build(w), pipe.layout)
                for s in specs
                if not s.window
                for w in CANDIDATE_WINDOWS
                if unbuildable(s, w) is None
            }
        )
        guided = {**pipe.defaults, **sampling}.get("cfg") not in (None, 1, 1.0)
        curve = forward_cost_curve(pipe.model, sizes, rows=2 if guided else 1)  # a guided decode runs the pair
        extra.update(cost_curve=curve, auto={})
        for s in specs:
            if not s.window:
                best, predicted = choose_window(pipe, s, prompts[0], seeds[0], curve, **sampling)
                extra["auto"][s.label] = {"window": best, "predicted_seconds": predicted}
                configs.append((s.label, best, True, s.method.lossless))
    t0 = time.perf_counter()
    rows = {(m, w, a): Row(m, w, lossless, a) for m, w, a, lossless in configs}
    if compile:
        compiled_warmup(pipe, rows, prompts[0], seeds[0], compile, **sampling)
        failed = [r for r in rows.values() if r.compile_error]
        if len(failed) == len(rows):
            raise RuntimeError(failed[0].compile_error)
        if any(r.method in BASELINES for r in failed):
            raise RuntimeError(f"{failed[0].method}: {failed[0].compile_error}")
        extra["compile_errors"] = {f"{r.method} @ {r.window}": r.compile_error for r in failed}
    for m, w, *_ in configs if warmup and not compile else []:
        decode_one(pipe, m, w, prompts[0], seeds[0], **sampling)
    extra["warmup_seconds"] = time.perf_counter() - t0
    jobs = [(p, seed, m, w, a) for p in prompts for seed in seeds for m, w, a, _ in configs]
    jobs = [j for j in jobs if not rows[j[2:]].compile_error]
    for prompt, seed, m, w, a in tqdm(jobs, disable=not progress, desc="bench", unit="run"):
        before = compile_counts()["graphs"]
        rows[m, w, a].add(decode_one(pipe, m, w, prompt, seed, compile, **sampling))
        if compile:
            rows[m, w, a].recompiles += compile_counts()["graphs"] - before
    extra["loadavg_after"] = loadavg()
    ar, plain = rows["ar", 1, False], rows[PLAIN, 1, False]
    by_wall, by_cpu = min(ar, plain, key=lambda r: r.wall), min(ar, plain, key=lambda r: r.cpu)
    for r in rows.values():
        if not r.runs:  # not compiled, not timed
            continue
        r.step_compression = step_compression(ar.nfe, r.nfe)
        r.latency_speedup = by_wall.wall / r.wall
        r.cpu_speedup = by_cpu.cpu / r.cpu
        r.latency_speedup_vs_ar = ar.wall / r.wall
    extra["baseline"] = {
        "wall": by_wall.method,
        "cpu": by_cpu.method,
        "wall_seconds": by_wall.wall,
        "cpu_seconds": by_cpu.cpu,
        "ar_over_plain_wall": ar.wall / plain.wall,
        "ar_over_plain_cpu": ar.cpu / plain.cpu,
    }
    order = {m: i for i, m in enumerate(dict.fromkeys(m for m, *_ in configs))}
    return sorted(rows.values(), key=lambda r: (order[r.method], r.auto, r.window)), extra


def compiled_warmup(pipe: ModelBundle, rows: dict, prompt: str, seed: int, compile: bool | str, **sampling):
    """Each row's first image twice, eager then compiled: the graphs and graph breaks compiling it
    took, and whether the tokens agree. A row's later images should compile nothing new
    (``recompiles``, counted by :func:`run_bench`)."""
    for (m, w, _), row in rows.items():
        eager = decode_one(pipe, m, w, prompt, seed, **sampling)
        before = compile_counts()
        try:
            run = decode_one(pipe, m, w, prompt, seed, compile, **sampling)
        except JacobigenError:
            raise
        except Exception as e:  # this row does not compile here: the others still run
            row.compile_error = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
            continue
        after = compile_counts()
        row.graphs = after["graphs"] - before["graphs"]
        row.graph_breaks = after["graph_breaks"] - before["graph_breaks"]
        row.recompiles = 0
        row.tokens_equal_eager = bool(torch.equal(eager.tokens, run.tokens))


def run_compiled_bench(pipe: ModelBundle, *args, compile: bool | str = True, **kwargs) -> tuple[list[Row], dict]:
    """:func:`run_bench` with every step compiled: its warm-up compiles, so ``warmup_seconds`` holds
    the compile time. Any failure to compile (no C++ compiler, an unsupported op) becomes one
    error that says so."""
    from torch._dynamo.utils import counters

    counters.clear()
    try:
        rows, extra = run_bench(pipe, *args, compile=compile, **kwargs)
    except JacobigenError:
        raise
    except Exception as e:
        raise JacobigenError(
            f"torch.compile failed on this machine ({type(e).__name__}): "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        ) from e
    frames = counters["frames"]
    extra["compile"] = {
        "mode": "under torch.compile(fullgraph=True, dynamic=False)"
        + ("" if compile is True else f", backend {compile}"),
        **compile_counts(),
        # frames dynamo gave up on run eager (recompile limit, unsupported code)
        "eager_frames": frames["total"] - frames["ok"],
        "eager_reasons": sorted({r.strip().splitlines()[0] for r in counters["unimplemented"]}),
    }
    return rows, extra


def run_settings(
    pipe: ModelBundle, threads: list[int | None], compile: bool | str, *args, **kwargs
) -> dict[str, tuple[list[Row], dict]]:
    """The whole bench once per thread count (None: :func:`~jacobigen.tools.threads.choose_threads`'s
    policy), and with ``compile`` once more per count on the compiled model. Keys: ``threads-N``
    and ``threads-N-compiled``."""
    results = {}
    for t in threads:
        n = choose_threads(pipe.model, t)
        if f"threads-{n}" in results:
            continue
        results[f"threads-{n}"] = run_bench(pipe, *args, **kwargs)
        if compile:
            results[f"threads-{n}-compiled"] = run_compiled_bench(pipe, *args, compile=compile, **kwargs)
    return results


FID_BATCH = 16  # sequences decoded together when sampling image sets


def sample_images(
    pipe: ModelBundle, method: str, window: int, prompts: list[str], seeds: list[int], **kwargs
) -> list[Image.Image]:
    """One image per (prompt, seed), ``FID_BATCH`` sequences in flight (continuous refill)."""
    return pipe.generate(prompts, method=method, window=window, seed=seeds, batch_size=FID_BATCH, **kwargs)[1]


@dataclass
class FidReference:
    """What sample sets are scored against: ``ar`` on a second, disjoint set of seeds, and the
    model's held-out images for the same captions (None when it ships none). Every set scored
    is made from the same ``prompts`` and ``seeds``."""

    pipe: ModelBundle
    prompts: list[str]
    seeds: list[int]
    ar: np.ndarray
    data: np.ndarray | None
    source: str
    sampling: dict

    @classmethod
    def build(cls, pipe: ModelBundle, n: int, **sampling) -> FidReference:
        data = None
        if pipe.reference is not None:
            captions, images = pipe.reference()
            prompts, data = (captions * n)[:n], features(images[:n])
            source = f"held-out captions; data: their {len(data)} held-out images"
        else:
            prompts = (pipe.example_prompts * n)[:n]
            source = "example prompts; FID vs data skipped: the model ships no held-out images"
        seeds = image_seeds(0, n)
        ar = features(sample_images(pipe, "ar", 1, prompts, image_seeds(n, n), **sampling))  # disjoint seeds
        return cls(pipe, prompts, seeds, ar, data, source, sampling)

    def score(self, method: str, window: int, **options) -> tuple[float, float | None]:
        """(FID vs ar, FID vs data) of this method's images for ``prompts`` and ``seeds``."""
        f = features(sample_images(self.pipe, method, window, self.prompts, self.seeds, **self.sampling, **options))
        return frechet_distance(f, self.ar), None if self.data is None else frechet_distance(f, self.data)

    def summary(self, ar_scores: tuple[float, float | None]) -> dict:
        """Sample size, prompts, seeds and the noise level, given ``ar``'s own scores (``ar`` on
        ``seeds`` against the reference ``ar`` on the other seeds, and against data)."""
        n = len(self.seeds)
        return {
            "images": n,
            "prompts": self.source,
            "seeds": [0, n],
            "ar_reference_seeds": [n, 2 * n],
            "ar_vs_ar": ar_scores[0],
            "ar_vs_data": ar_scores[1],
            "ar_reference_vs_data": None if self.data is None else frechet_distance(self.ar, self.data),
        }


def run_fid(pipe: ModelBundle, rows: list[Row], n: int, progress: bool = True, **sampling) -> dict:
    """Sample ``n`` images per (method, window) row, same prompts and seeds for every row, and set
    the rows' FID figures. ``ar``'s own row against the ``ar`` reference is the noise level: two
    ``ar`` runs with different seeds; a lossless method should land within it."""
    ref = FidReference.build(pipe, n, **sampling)
    scores: dict = {}
    for r in tqdm(
        [r for r in rows if r.method != PLAIN], disable=not progress, desc=f"FID ({n} images/row)", unit="row"
    ):  # the plain loop samples AR's distribution by construction
        if (r.method, r.window) not in scores:
            scores[r.method, r.window] = ref.score(r.method, r.window)
        r.fid_vs_ar, r.fid_vs_data = scores[r.method, r.window]
    return {"fid": ref.summary(scores["ar", 1])}


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
    for name, why in extra.get("skipped", {}).items():
        lines.append(f"Skipped {name}: {why}.\n")
    for name, why in extra.get("compile_errors", {}).items():
        lines.append(f"Not compiled, not timed: {name}: {why}.\n")
    if "baseline" in extra:
        b = extra["baseline"]
        names = b["wall"] if b["wall"] == b["cpu"] else f"{b['wall']} (wall time) and {b['cpu']} (CPU time)"
        lines.append(
            f"Speedups against {names}, the faster of ar and {PLAIN} ({b['wall_seconds']:.2f} s/image "
            f"wall, {b['cpu_seconds']:.2f} s/image CPU); ar takes {b['ar_over_plain_wall']:.2f}x the plain "
            f"loop's wall time and {b['ar_over_plain_cpu']:.2f}x its CPU time.\n"
        )
    return "\n".join(lines) + ("\n" if lines else "")


def markdown(rows: list[Row], extra: dict | None = None) -> str:
    extra = extra or {}
    fid = extra.get("fid")
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
    return header(extra) + md_table(cols, cells) + ("\n" + fid_note(fid) if fid else "")


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
