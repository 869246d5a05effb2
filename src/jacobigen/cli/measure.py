"""``jacobigen bench``, ``throughput`` and ``analyze``: measure methods on a model and write reports."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from ..core.checks import image_seeds
from ..core.errors import JacobigenError
from ..tools.files import check_writable
from .group import BadInput, main
from .options import ModelChoice, model_options, sampling_options


def _csv(kind):
    def parse(ctx, param, value):
        if value is None:
            return None
        try:
            values = [v if v == "auto" else kind(v) for v in value.split(",") if v.strip()]
        except ValueError as e:
            raise click.BadParameter(str(e)) from e
        if not values:
            raise click.BadParameter(f"give at least one value, got {value!r}")
        return values

    return parse


def _variants(ctx, param, value):
    from ..decode.methods import parse_variant, split_variants
    from ..tools.bench_rows import PLAIN

    names = split_variants(value)
    if not names:
        raise click.BadParameter(f"give at least one method, got {value!r}")
    try:
        for name in names:
            if name not in (PLAIN, "auto"):
                parse_variant(name)
    except JacobigenError as e:
        raise click.BadParameter(str(e)) from e
    return names


@main.command()
@model_options(threads=False)
@click.option(
    "--methods",
    "method_names",
    default="sjd,scd-mc,scd-gs,sjd-pac,sjd-vp,scd-mc+pac+vp",
    show_default=True,
    callback=_variants,
    help="Comma-separated presets (ar and the plain loop plain-ar always run); a preset with options "
    "is written NAME[key=value,...], e.g. 'sjd-pac[tree_budget=full,window=32]'; 'auto' adds the row "
    "`generate --method auto` would run here.",
)
@click.option(
    "--window",
    "windows",
    default="16,32,64",
    show_default=True,
    callback=_csv(int),
    help="Comma-separated windows; 'auto' picks one per method from this device's costs.",
)
@click.option(
    "--prompts",
    "n_prompts",
    default=2,
    show_default=True,
    type=int,
    help="How many of the model's example prompts to use.",
)
@click.option(
    "--prompt",
    "prompt_texts",
    multiple=True,
    help="A prompt to run instead of the example prompts (repeatable; a Cosmos prompt is its .npy "
    "of condition tokens).",
)
@click.option("--seeds", "n_seeds", default=1, show_default=True, type=int)
@sampling_options()
@click.option(
    "--fid",
    "n_fid",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Images per row for FID vs ar and vs held-out data (0: off; needs jacobigen[eval]).",
)
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("bench-out"), show_default=True
)
@click.option(
    "--threads",
    "thread_counts",
    default=None,
    callback=_csv(int),
    help="Comma-separated torch CPU thread counts: the whole bench runs once per count, each in "
    "OUT/threads-N/ when there are several (default: one run, 1 thread for a model under 50M "
    "parameters on the CPU, else torch's default).",
)
@click.option(
    "--compile",
    "use_compile",
    is_flag=True,
    help="Also run the bench with every decode step compiled as one graph (torch.compile, fullgraph), in "
    "OUT/threads-N-compiled/, against compiled ar and the compiled plain loop; each row records its graphs, "
    "recompiles after the first image, graph breaks and whether its tokens equal eager's.",
)
@click.option(
    "--compile-backend",
    default=None,
    help="torch.compile backend for --compile (default inductor; 'eager' traces without generating code).",
)
@click.option(
    "--steps",
    "steps_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Instead of timing, write the step table `--method auto` reads: forward passes per image of ar and "
    "every auto candidate on the prompts and seeds, with the sampling (an entry per sampling; put it in "
    "~/.cache/jacobigen/steps/ for auto to find it).",
)
def bench(
    model: ModelChoice,
    method_names,
    windows,
    n_prompts,
    prompt_texts,
    n_seeds,
    sampling,
    n_fid,
    out_dir,
    thread_counts,
    use_compile,
    compile_backend,
    steps_path,
):
    """Compare methods on the same prompts and seeds; write bench.json and bench.md."""
    from ..tools.bench import run_settings
    from ..tools.bench_fid import run_fid
    from ..tools.bench_report import write_reports

    if thread_counts is not None and not all(isinstance(t, int) and t >= 1 for t in thread_counts or [0]):
        raise click.BadParameter("thread counts must be >= 1", param_hint="--threads")
    if n_prompts < 1 or n_seeds < 1:
        raise click.BadParameter("--prompts and --seeds must be >= 1")
    if n_fid == 1:
        raise click.BadParameter("FID needs at least 2 images", param_hint="--fid")
    if compile_backend is not None and not use_compile:
        raise click.BadParameter("--compile-backend needs --compile", param_hint="--compile-backend")
    if steps_path is None:
        check_writable(out_dir, "--out", folder=True)
    else:  # --steps writes its table only
        from ..tools.steps import existing_table

        _steps_only()
        steps_path = check_writable(steps_path, "--steps")  # a symlink: the table it points to
        existing_table(steps_path)  # a file that is not a step table: refused before the model loads
    bundle = model.load()
    if sampling:  # every row samples as the user asked; bench.json records it
        bundle = replace(bundle, defaults={**bundle.defaults, **sampling})
    prompts = list(prompt_texts) or (bundle.example_prompts * n_prompts)[:n_prompts]
    if not prompts:
        raise BadInput(f"the {bundle.name} model has no example prompts: give one or more --prompt")
    if steps_path is not None:
        return _write_steps(bundle, model, steps_path, prompts, n_seeds, thread_counts)
    if n_fid:
        from ..core.layout import VideoLayout
        from ..tools.fid import network

        if isinstance(bundle.layout, VideoLayout):
            raise click.BadParameter(f"FID scores images; the {bundle.name} model makes clips", param_hint="--fid")

        network()  # fail before the timing runs when the eval extra is missing
    results = run_settings(
        bundle,
        thread_counts or [None],
        (compile_backend or True) if use_compile else False,
        method_names,
        windows,
        prompts,
        image_seeds(0, n_seeds),
        model_spec=model.spec,
    )
    if n_fid:  # image quality does not depend on threads or compilation: the first setting gets it
        rows, extra = next(iter(results.values()))
        extra.update(run_fid(bundle, rows, n_fid))
    text = write_reports(
        results, out_dir, {"model": bundle.name, "prompts": prompts, "seeds": n_seeds, "sampling": bundle.defaults}
    )
    click.echo(text)
    folders = "plots" if len(results) == 1 else f"a folder per setting ({', '.join(results)})"
    click.echo(f"wrote {out_dir}/: bench.json, bench.md and {folders}")


STEPS_IGNORE = ("method_names", "windows", "n_fid", "out_dir", "use_compile", "compile_backend")


def _steps_only() -> None:
    """``--steps`` measures forwards of ar and auto's candidates, and writes nothing else: the options
    that choose or time other rows would be ignored, so they are refused."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = [p for p in ctx.command.params if p.name in STEPS_IGNORE]
    given = [p for p in given if ctx.get_parameter_source(p.name) not in (ParameterSource.DEFAULT, None)]
    if given:
        from ..decode.auto import METHODS, WINDOWS

        flags = ", ".join(p.opts[0] for p in given)
        raise click.UsageError(
            f"{flags} cannot apply with --steps: it measures ar and auto's candidates ({', '.join(METHODS)} at "
            f"windows {', '.join(map(str, WINDOWS))}), the rows auto weighs, and writes only the table"
        )


def _write_steps(bundle, model: ModelChoice, path: Path, prompts: list[str], n_seeds: int, threads) -> None:
    """``bench --steps FILE``: the step table of ``bundle`` with its sampling (no timing)."""
    from ..decode.auto import candidates
    from ..tools.steps import check_model, existing_table, measure_steps, write_table
    from ..tools.threads import choose_threads

    check_model(existing_table(path), path, bundle)  # another model's table: refused before the work
    choose_threads(bundle.model, (threads or [None])[0])
    seeds = image_seeds(0, n_seeds)
    steps = measure_steps(bundle, candidates(), prompts, seeds, progress=True)
    how = {"by": f"jacobigen bench --model {model.spec} --steps", "prompts": prompts, "seeds": seeds}
    did = write_table(path, bundle, steps, bundle.defaults, how)
    ar = steps["ar@1"]["nfe"]
    for name, row in steps.items():
        click.echo(f"{name:>12}: {row['nfe']:7.1f} forwards per image ({ar / row['nfe']:.2f}x fewer than ar)")
    click.echo(f"wrote {path}: {did}")


@main.command()
@model_options()
@click.option(
    "--methods",
    "method_names",
    default="ar,sjd-pac",
    show_default=True,
    callback=_csv(str),
    help="Comma-separated presets (the batched plain loop plain-ar always runs).",
)
@click.option(
    "--batch",
    "batch_sizes",
    default="1,4,16",
    show_default=True,
    callback=_csv(int),
    help="Comma-separated batch sizes.",
)
@click.option(
    "--images",
    "n_images",
    default=16,
    show_default=True,
    type=click.IntRange(min=1),
    help="Images per (method, batch size).",
)
@click.option("--window", default=16, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--repeats",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Runs per setting; the fastest is reported.",
)
@click.option(
    "--modes",
    default="shared,deterministic",
    show_default=True,
    callback=_csv(click.Choice(["shared", "deterministic", "per-sequence"])),
    help="How the batch runs its forward: shared (the default of generate), deterministic (shared, on "
    "row-invariant kernels), per-sequence (each sequence its own forwards).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-out/throughput"),
    show_default=True,
)
def throughput(model: ModelChoice, method_names, batch_sizes, n_images, window, repeats, modes, out_dir):
    """Images/s and tokens/s against batch size; write throughput.json, .md and .png."""
    from ..tools.throughput import markdown, run_throughput, write_report

    if any(b < 1 for b in batch_sizes):
        raise click.BadParameter("batch sizes must be >= 1", param_hint="--batch")
    check_writable(out_dir, "--out", folder=True)
    bundle = model.load()
    rows, info = run_throughput(
        bundle, method_names, batch_sizes, n_images, window, repeats, model_spec=model.spec, modes=tuple(modes)
    )
    write_report(rows, info, out_dir, {"model": bundle.name, "sampling": bundle.defaults, "window": window})
    click.echo(markdown(rows, info))
    click.echo(f"wrote {out_dir}/: throughput.json, throughput.md, throughput.png")


@main.command()
@model_options()
@click.option(
    "--prompt",
    "prompt_texts",
    multiple=True,
    help="A prompt to measure on (repeatable; default: the model's first two example prompts).",
)
@click.option(
    "--seeds",
    "n_seeds",
    default=4,
    show_default=True,
    type=click.IntRange(min=1, max=1024),
    help="Images per prompt, seeds 0..N-1.",
)
@click.option("--window", default=32, show_default=True, type=click.IntRange(min=2, max=1024))
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("analyze-out"), show_default=True
)
@click.option("--progress/--no-progress", default=True, show_default=True)
def analyze(model: ModelChoice, prompt_texts, n_seeds, window, out_dir, progress):
    """The seed papers' diagnostics on a model: coupling-strength and guidance sweeps, multi-step
    Hamming distance, accepted lengths, token locality and row dependency (PNG + JSON each)."""
    from ..tools.analyze import run_all

    check_writable(out_dir, "--out", folder=True)
    bundle = model.load()
    prompts = list(prompt_texts) or bundle.example_prompts[:2]
    run_all(bundle, prompts, image_seeds(0, n_seeds), window, out_dir, progress, model_spec=model.spec)
    click.echo(f"wrote {out_dir}/: alpha, hamming, cfg, accepted, influence (.png and .json)")
