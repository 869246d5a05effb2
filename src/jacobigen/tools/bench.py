"""Side-by-side benchmark: every method on the same prompts and seeds, interleaved, in one process.

Two baselines run beside the methods: ``ar`` (the engine at window 1) and ``plain-ar``, the plain
KV-cache loop a user would write (:mod:`jacobigen.tools.plain_ar`); a third, ``plain-ar-float32``, where
the model runs in another dtype than the float32 its weights ship in (the embedded models in bfloat16 on
a CPU with native bf16). Latency figures are against the fastest, so neither engine overhead nor a slow
dtype's loop can flatter the methods; ``ar``'s time over the plain loop's is
reported beside them. Per method and window: forward passes per image, step compression (``ar``'s
forward passes over the method's), speedups in wall time and in CPU time (``process_time`` adds up
every thread, so threads that spin show), the tokens-per-iteration histogram (and the share of
iterations that commit a single token), and the share of wall time spent outside the model forward.
Times cover token generation only, not the VQ decoder (the same for every row).
With ``fid``: FID of each row's images against ``ar``'s on other seeds and against held-out data.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field, replace

import torch
from tqdm.auto import tqdm

from ..core.checks import SAMPLING_KEYS
from ..core.contract import model_device, model_dtype, sync
from ..core.errors import ConfigError, JacobigenError
from ..core.quantize import quantized_as
from ..core.stats import step_compression
from ..decode.api import generate
from ..decode.auto import WINDOWS, unbuildable
from ..decode.capture import Graphed, compile_counts
from ..decode.costs import block_size, forward_cost_curve
from ..decode.engine import CompileFallback
from ..decode.methods import parse_variant
from ..models.bundle import ModelBundle, encode_one
from ..models.load import load_bundle, ours
from .auto import choose
from .bench_rows import BASELINES, PLAIN, PLAIN32, Row, Run
from .plain_ar import plain_ar
from .threads import choose_threads, environment, loadavg


def plain_options(pipe: ModelBundle, sampling: dict) -> dict:
    """The sampling options the plain loop takes (the model's defaults under ``sampling``)."""
    opts = {k: v for k, v in {**pipe.defaults, **sampling}.items() if v is not None}
    if set(opts) - set(SAMPLING_KEYS):
        raise ConfigError(f"the {PLAIN} baseline takes cfg, temperature, top_k and top_p only, got {sorted(opts)}")
    return opts


def decode_one(
    pipe: ModelBundle, method: str, window: int, prompt: str, seed: int, compile: bool | str = False, **sampling
) -> Run:
    """Generate one image's tokens with ``method`` (a preset or ``NAME[key=value,...]``, or the plain
    loop), timed on the wall clock and the process CPU clock with the device synchronised at both ends.
    ``compile``: the step as one compiled graph (the plain loop: its forward compiled). On a GPU the
    plain loop's forwards replay CUDA graphs, as a decode's do by default.

    The plain loop's forward passes are counted, not measured: one prefill (which gives the first
    token) and one per further token, ``layout.length`` in all, the same count as ``ar``'s, so its
    step compression is 1; every iteration commits one token."""
    opts = plain_options(pipe, sampling) if method == PLAIN else {**pipe.defaults, **sampling}
    model, tokens, uncond = encode_one(pipe, prompt)
    device = model_device(model)
    sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    if method == PLAIN:
        # the baseline gets the decodes' treatment: graphed forwards on CUDA, compiled with ``compile``
        out = plain_ar(graphed(model, compile), pipe.layout, tokens, uncond, seed=seed, **opts)
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


@dataclass(frozen=True)
class Config:
    """One row to run: a preset label (or the plain loop) at a window; ``auto``: the window (or the
    method) is the one auto chose. Rows are keyed by (method, window, auto)."""

    method: str
    window: int
    auto: bool = False
    lossless: bool = field(default=True, compare=False)

    def row(self) -> Row:
        return Row(self.method, self.window, self.lossless, self.auto)


@dataclass(frozen=True)
class Job:
    """One timed image: a prompt and a seed, decoded as ``config`` says."""

    prompt: str
    seed: int
    config: Config


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

    ``windows`` may contain "auto": the window is then chosen per method from the model's step
    table and this machine's costs (:func:`jacobigen.tools.auto.choose`, not cached; without a
    table the window the prior predicts fastest); ``methods`` may contain "auto": the (method, window) ``--method
    auto`` would run.
    Returns the rows and the other data: baselines, warm-up time, cost curve, and the machine, code and weights
    (:func:`~jacobigen.tools.threads.environment`, given the ``--model`` spec ``model_spec``) with the load
    average before and after.

    ``compile`` runs every row (baselines included) with its step compiled (:func:`compiled_warmup`).
    """
    extra: dict = environment(pipe.model, model_spec)
    specs = [parse_variant(m) for m in dict.fromkeys(["ar", *methods]) if m not in (*BASELINES, "auto")]
    configs = _fixed_configs(specs, [w for w in windows if w != "auto"], extra)
    twin = None if compile else float32_twin(pipe, model_spec)
    configs[2:2] = [Config(PLAIN32, 1)] if twin else []  # beside the other baselines
    if "auto" in windows:
        configs += _auto_windows(pipe, specs, sampling, extra)
    if "auto" in methods:
        configs.append(_auto_method(pipe, sampling, extra))
    t0 = time.perf_counter()
    rows = {c: c.row() for c in configs}  # one row per (method, window, auto): a repeat runs once
    if compile:
        _compile_rows(pipe, rows, prompts[0], seeds[0], compile, extra, **sampling)
    for c in rows if warmup and not compile else []:
        _decode(pipe, twin, c, prompts[0], seeds[0], False, sampling)
    extra["warmup_seconds"] = time.perf_counter() - t0
    jobs = [Job(p, seed, c) for p in prompts for seed in seeds for c in rows if not rows[c].compile_error]
    for job in tqdm(jobs, disable=not progress, desc="bench", unit="run"):
        row, c = rows[job.config], job.config
        before = compile_counts()["graphs"]
        row.add(_decode(pipe, twin, c, job.prompt, job.seed, compile, sampling))
        if compile:
            row.recompiles += compile_counts()["graphs"] - before
    extra["loadavg_after"] = loadavg()
    plains = [rows[c] for c in (Config(PLAIN, 1), Config(PLAIN32, 1)) if c in rows]
    extra["baseline"] = _speedups(rows[Config("ar", 1)], plains, rows.values())
    order = {m: i for i, m in enumerate(dict.fromkeys(c.method for c in rows))}
    return sorted(rows.values(), key=lambda r: (order[r.method], r.auto, r.window)), extra


def float32_twin(pipe: ModelBundle, model_spec: str | None) -> ModelBundle | None:
    """The bundle on its float32 model, when ``pipe`` runs an embedded model (weights shipped in
    float32) on a CPU in another dtype, unquantized: the plain loop a user writes runs that one."""
    if model_spec is None or not ours(model_spec) or model_device(pipe.model).type != "cpu":
        return None
    if model_dtype(pipe.model) == "float32" or quantized_as(pipe.model):
        return None
    return replace(pipe, model=load_bundle(model_spec, "cpu", dtype="float32").model)


def _decode(pipe: ModelBundle, twin, c: Config, prompt: str, seed: int, compile, sampling: dict) -> Run:
    """One image of row ``c``: the float32 plain loop on ``twin``, every other row on ``pipe``."""
    if c.method == PLAIN32:
        return decode_one(twin, PLAIN, 1, prompt, seed, compile, **sampling)
    return decode_one(pipe, c.method, c.window, prompt, seed, compile, **sampling)


def _fixed_configs(specs, windows: list[int], extra: dict) -> list[Config]:
    """The baselines, each preset with a window of its own, and every other preset at each of
    ``windows``; a (method, window) that cannot be built (a full tree in too small a window) is
    skipped, with the reason in ``extra["skipped"]``."""
    configs = [Config("ar", 1), Config(PLAIN, 1)]
    configs += [Config(s.label, s.window, lossless=s.method.lossless) for s in specs[1:] if s.window]
    why = {(s.label, w): unbuildable(s, w) for s in specs if not s.window for w in windows}
    extra["skipped"] = {f"{label} @ {w}": reason for (label, w), reason in why.items() if reason}
    return configs + [
        Config(s.label, w, lossless=s.method.lossless)
        for s in specs
        if not s.window
        for w in windows
        if not why[s.label, w]
    ]


def _auto_windows(pipe: ModelBundle, specs, sampling: dict, extra: dict) -> list[Config]:
    """Each preset without a window of its own at the window auto chooses for it here; the cost
    curve over every block size a candidate can use goes to ``extra``."""
    sizes = {
        block_size(s.build(w), pipe.layout) for s in specs if not s.window for w in WINDOWS if not unbuildable(s, w)
    }
    guided = {**pipe.defaults, **sampling}.get("cfg") not in (None, 1, 1.0)
    curve = forward_cost_curve(  # a guided decode runs the cond/uncond pair
        pipe.model, sorted({1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160} | sizes), rows=2 if guided else 1
    )
    extra.update(cost_curve=curve, auto={})
    configs = []
    for s in specs:
        if not s.window:
            choice = choose(pipe, s.label, None, **sampling)
            extra["auto"][s.label] = {"window": choice.window, "predicted_seconds": choice.predicted}
            configs.append(Config(s.label, choice.window, True, s.method.lossless))
    return configs


def _auto_method(pipe: ModelBundle, sampling: dict, extra: dict) -> Config:
    """The (method, window) ``--method auto`` would run here, as a row marked auto."""
    choice = choose(pipe, "auto", None, **sampling)
    extra["auto_method"] = {
        "method": choice.method,
        "window": choice.window,
        "predicted_speedup_vs_ar": choice.speedup,
        "predicted_seconds": choice.predicted,
    }
    return Config(choice.method, choice.window, True)


def _compile_rows(pipe, rows: dict[Config, Row], prompt: str, seed: int, compile, extra: dict, **sampling) -> None:
    """:func:`compiled_warmup`; a baseline that does not compile (or every row) is an error, another
    row that does not is reported in ``extra["compile_errors"]`` and not timed."""
    compiled_warmup(pipe, rows, prompt, seed, compile, **sampling)
    failed = [r for r in rows.values() if r.compile_error]
    if len(failed) == len(rows):
        raise RuntimeError(failed[0].compile_error)
    if any(r.method in BASELINES for r in failed):
        raise RuntimeError(f"{failed[0].method}: {failed[0].compile_error}")
    extra["compile_errors"] = {f"{r.method} @ {r.window}": r.compile_error for r in failed}


def _speedups(ar: Row, plains: list[Row], rows) -> dict:
    """Each timed row's step compression and speedups against the fastest baseline (by wall and by
    CPU time) and against ``ar``; returns the baselines' record (``plains``: the plain loop in the
    model's dtype, then in float32 where it ran)."""
    plain = plains[0]
    by_wall, by_cpu = min(ar, *plains, key=lambda r: r.wall), min(ar, *plains, key=lambda r: r.cpu)
    for r in rows:
        if not r.runs:  # not compiled, not timed
            continue
        r.step_compression = step_compression(ar.nfe, r.nfe)
        r.latency_speedup = by_wall.wall / r.wall
        r.cpu_speedup = by_cpu.cpu / r.cpu
        r.latency_speedup_vs_ar = ar.wall / r.wall
    return {
        "wall": by_wall.method,
        "cpu": by_cpu.method,
        "wall_seconds": by_wall.wall,
        "cpu_seconds": by_cpu.cpu,
        "ar_over_plain_wall": ar.wall / plain.wall,
        "ar_over_plain_cpu": ar.cpu / plain.cpu,
    }


def compiled_warmup(
    pipe: ModelBundle, rows: dict[Config, Row], prompt: str, seed: int, compile: bool | str, **sampling
):
    """Each row's first image twice, eager then compiled: the graphs and graph breaks compiling it
    took, and whether the tokens agree. A row's later images should compile nothing new
    (``recompiles``, counted by :func:`run_bench`)."""
    for c, row in rows.items():
        m, w = c.method, c.window
        eager = decode_one(pipe, m, w, prompt, seed, **sampling)
        before = compile_counts()
        try:
            with warnings.catch_warnings():  # a step that falls back to eager did not compile: say so
                warnings.simplefilter("error", CompileFallback)
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
