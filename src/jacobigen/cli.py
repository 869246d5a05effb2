"""Command line: ``jacobigen generate``, ``bench``, ``throughput``, ``methods``.

Arguments are checked before torch is imported and before a model loads, and output paths before
any image exists: a bad input is one line naming it and its limit (exit 2); a failure while
running is one line too (exit 1); ``jacobigen --debug ...`` shows the traceback instead.
"""

from __future__ import annotations

import io
import json
import math
import os
import warnings
from pathlib import Path

import click
from click.core import ParameterSource

from .core.checks import MAX_SEED, image_seeds, number, parse_options
from .core.errors import ConfigError, JacobigenError, PromptWarning
from .models import embedded as E
from .tools import extras
from .tools.files import FolderLock, atomic_write, check_writable, distinct, read_prompts

MAX_IMAGES = 1_000_000  # --num-images
MAX_SHEET_IMAGES = 256  # images in one --out sheet (more: --prompts FILE --out-dir DIR)
MAX_SIZE = 4096  # --size, pixels per image
MAX_SHEET_PIXELS = 1 << 28  # the whole sheet (768 MiB as RGB)
RESERVED = {
    "method",
    "window",
    "seed",
    "batch_size",
    "cfg",
    "temperature",
    "top_k",
    "top_p",
    "uncond",
    "progress",
    "timing",
}  # generate() arguments that have their own flags, not -o options


class BadInput(click.ClickException):
    """A bad argument found after parsing (by the part that owns it): exit 2 like click's own."""

    exit_code = 2


class Finite(click.ParamType):
    """A finite float (click's FLOAT takes nan and inf), optionally bounded."""

    name = "number"

    def __init__(self, lo: float | None = None, hi: float | None = None, lo_open: bool = False):
        self.lo, self.hi, self.lo_open = lo, hi, lo_open

    def convert(self, value, param, ctx):
        try:
            return number(
                param.opts[0] if param else "value",
                float(value) if isinstance(value, str) else value,
                self.lo,
                self.hi,
                self.lo_open,
            )
        except ValueError as e:
            self.fail(str(e) if isinstance(e, ConfigError) else f"{value!r} is not a number", param, ctx)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    if issubclass(category, PromptWarning):
        click.echo(f"warning: {message}", err=True)
    else:
        click.echo(f"warning: {category.__name__}: {message}", err=True)


def _as_click(e: Exception) -> click.ClickException:
    """One line for a failure: bad input (exit 2), a failure of ours or of the machine (exit 1)."""
    if isinstance(e, ConfigError):
        return BadInput(str(e))
    if isinstance(e, JacobigenError):
        return click.ClickException(str(e))
    if isinstance(e, MemoryError):
        return click.ClickException("out of memory: lower --batch-size, --window, --num-images or --size")
    return click.ClickException(
        f"unexpected {type(e).__name__}: {e} (rerun as `jacobigen --debug ...` for the traceback, and please report it)"
    )


class Main(click.Group):
    """Turns every error into one line, unless ``--debug``."""

    def invoke(self, ctx):
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            try:
                return super().invoke(ctx)
            except (click.ClickException, click.exceptions.Exit, click.Abort):
                raise
            except Exception as e:
                if ctx.params.get("debug"):
                    raise
                raise _as_click(e) from None


def image_grid(images, size: int):
    """Images scaled to ``size`` pixels wide (nearest neighbour: tokens stay visible), tiled."""
    from PIL import Image

    images = [img.resize((size, round(size * img.height / img.width)), Image.NEAREST) for img in images]
    cols = math.ceil(math.sqrt(len(images)))
    rows = math.ceil(len(images) / cols)
    w, h = images[0].size
    sheet = Image.new("RGB", (cols * w, rows * h), "white")
    for i, img in enumerate(images):
        sheet.paste(img, ((i % cols) * w, (i // cols) * h))
    return sheet


def image_format(out: Path) -> str:
    """The Pillow format ``out``'s extension names (checked before any work)."""
    from PIL import Image

    Image.init()
    fmt = Image.registered_extensions().get(out.suffix.lower())
    if fmt not in Image.SAVE:
        raise BadInput(
            f"--out {out}: the extension {out.suffix or '(none)'!r} names no image format Pillow can write; use .png"
        )
    return fmt


def options_of(pairs: tuple[str, ...]) -> dict:
    """``-o key=value`` pairs as method options; generate's own settings have their own flags."""
    try:
        options = parse_options(pairs)
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--option") from e
    for key in options.keys() & RESERVED:
        raise click.BadParameter(f"{key} is not a method option: use --{key.replace('_', '-')}", param_hint=f"-o {key}")
    return options


def check_seeds(seed: int, n: int) -> list[int]:
    """The seeds of ``n`` images from --seed, checked before any work (image i gets seed + i)."""
    try:
        return image_seeds(seed, n)
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--seed") from e


def trace_path(out: Path) -> Path:
    return out.with_name(out.stem + ".trace.png")


def check_outputs(out: Path, stats_path: Path | None, trace: bool) -> None:
    """--out, --stats and --trace's file, before any work: each a regular file (or a symlink to one,
    followed) or nothing yet, writable, and no two of them the same file."""
    named = {"--out": out, "--stats": stats_path, "--trace": trace_path(out) if trace else None}
    distinct(named)
    for what, path in named.items():
        if path is not None:
            check_writable(path, what)


def check_method(method: str, window: int, options: dict) -> None:
    """The method and its options, built once before the model loads (their parts check them)."""
    from .decode.methods import get_method

    spec = get_method(method)
    spec.build(spec.window or window, **options)


MAX_THREADS_PER_CORE = 4  # --threads above this many per core is refused


def _threads(ctx, param, value):
    """More torch threads than cores only wait on each other: a warning above the cores, refused far
    above them (--threads 1000 on 2 cores ran 25x slower)."""
    if value is None:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if value > MAX_THREADS_PER_CORE * cores:
        raise click.BadParameter(
            f"{value} threads on {cores} core(s): at most {MAX_THREADS_PER_CORE * cores}; threads beyond "
            "the cores only wait on each other"
        )
    if value > cores:
        click.echo(f"warning: --threads {value} is more than the {cores} core(s) here: expect it slower", err=True)
    return value


THREADS = click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    callback=_threads,
    help="Torch CPU threads (default: 1 for a model under 50M parameters on the CPU, where a second "
    "OpenMP thread stalls whenever the other core is busy; else torch's default).",
)
TRUST = click.option(
    "--trust-checkpoint",
    is_flag=True,
    help="Let pickled checkpoints that hold Python objects load (LlamaGen's training checkpoints store "
    "their argparse.Namespace). Unpickling can run code: only for files you trust.",
)
DEFAULTS = ", ".join(f"{k.replace('_', '-')} {v}" for k, v in E.SAMPLING.items())


@click.group(cls=Main)
@click.version_option(package_name="jacobigen")
@click.option("--debug", is_flag=True, help="Show the Python traceback of an error.")
def main(debug):
    """Fast, exact Jacobi decoding for autoregressive image generators."""


def decoding_options(default_model: str, model_help: str):
    """The options ``generate`` and ``generate-video`` share: model, method, seeds, sampling, stats."""
    shared = [
        click.option("--model", "model_spec", default=default_model, show_default=True, help=model_help),
        click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)."),
        click.option(
            "--method",
            default="sjd",
            show_default=True,
            help="A preset, or parts joined by + such as scd-gs+pac+vp (see `jacobigen methods`).",
        ),
        click.option(
            "--window",
            default=32,
            show_default=True,
            type=click.IntRange(min=1),
            help="Tokens in flight per iteration (at most the image's tokens + 4096).",
        ),
        click.option(
            "--seed",
            default=0,
            show_default=True,
            type=click.IntRange(0, MAX_SEED),
            help="Image (clip) i gets seed SEED + i.",
        ),
        click.option(
            "--batch-size",
            type=click.IntRange(min=1),
            default=None,
            help="Images decoded together (default: all that fit in half the free memory); finished "
            "rows take the next prompt.",
        ),
        click.option(
            "--cfg",
            type=Finite(),
            default=None,
            help=f"Classifier-free guidance scale (1: none). Default: the model's own (the default model "
            f"samples with {DEFAULTS}; random with cfg 1, temperature 1, all ids).",
        ),
        click.option(
            "--temperature",
            type=Finite(0, lo_open=True),
            default=None,
            help="Softmax temperature, > 0 (smaller: sharper). Default: the model's own (1 for the default model).",
        ),
        click.option(
            "--top-k",
            type=click.IntRange(min=1),
            default=None,
            help="Sample among the K most likely image ids. Default: the model's own (200 for the "
            "default model; all for random).",
        ),
        click.option(
            "--top-p",
            type=Finite(0, 1, lo_open=True),
            default=None,
            help="Sample among the most likely ids holding this much probability, in (0, 1]. Default: 1.",
        ),
        click.option("--option", "-o", "options", multiple=True, help="Method hyper-parameter, KEY=VALUE."),
        click.option(
            "--stats",
            "stats_path",
            type=click.Path(path_type=Path),
            default=None,
            help="Also write the decoding statistics as JSON.",
        ),
        click.option("--progress/--no-progress", default=True, show_default=True),
    ]

    def apply(f):
        for option in reversed(shared):
            f = option(f)
        return f

    return apply


@main.command()
@click.argument("prompts", nargs=-1)
@decoding_options("default", "'default' (embedded emoji model), 'random' (random weights), or FAMILY:PATH.")
@click.option(
    "--num-images", default=1, show_default=True, type=click.IntRange(1, MAX_IMAGES), help="Images per prompt."
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Image to write, a grid when several; its extension names the format.  [default: out.png]",
)
@click.option(
    "--size",
    default=256,
    show_default=True,
    type=click.IntRange(8, MAX_SIZE),
    help="Width in pixels of each image in the PNG.",
)
@click.option(
    "--prompts",
    "prompts_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File with one prompt per line: one PNG + JSON record per image in --out-dir; a rerun skips finished images.",
)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("jacobigen-out"),
    show_default=True,
    help="Output folder for --prompts / --ray runs.",
)
@click.option(
    "--chunk",
    default=16,
    show_default=True,
    type=click.IntRange(min=1),
    help="Images per decode call in --prompts / --ray runs (outputs land per chunk).",
)
@click.option("--ray", "use_ray", is_flag=True, help="Fan the images out to Ray workers.")
@click.option("--address", default=None, help="Ray cluster address (default: start a local instance).")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 1024), help="Ray workers.")
@click.option(
    "--trace", is_flag=True, help="Also write OUT's stem + .trace.png: which iteration committed each token, per image."
)
@click.option(
    "--compile",
    "compile_step",
    is_flag=True,
    help="Run each decode step as one torch.compile graph: the same distribution; the first image of each block "
    "shape pays the compilation (tens of seconds), later ones run faster.",
)
@THREADS
@TRUST
def generate(
    prompts,
    model_spec,
    device,
    method,
    window,
    seed,
    num_images,
    batch_size,
    cfg,
    temperature,
    top_k,
    top_p,
    options,
    out,
    size,
    stats_path,
    prompts_file,
    out_dir,
    chunk,
    use_ray,
    address,
    workers,
    progress,
    threads,
    trace,
    compile_step,
    trust_checkpoint,
):
    """Generate images for PROMPTS and report how many forward passes it took."""
    jobs_run = prompts_file is not None or use_ray
    if compile_step and jobs_run:
        raise click.UsageError("--compile applies to one sheet; --prompts/--ray runs decode eagerly")
    _check_combination(prompts, prompts_file, use_ray, address, out, stats_path, threads, trace)
    options = options_of(options)
    sampling = {
        k: v for k, v in dict(cfg=cfg, temperature=temperature, top_k=top_k, top_p=top_p).items() if v is not None
    }
    if jobs_run:
        if click.get_current_context().get_parameter_source("size") is not ParameterSource.DEFAULT:
            raise click.UsageError("--size sets the tiles of one sheet; --prompts/--ray write each image as made")
        texts = read_prompts(prompts_file) if prompts_file else list(prompts)
        check_seeds(seed, len(texts) * num_images)
        check_writable(out_dir, "--out-dir", folder=True)
        check_method(method, window, options)
        return _generate_jobs(
            texts,
            (model_spec, device, trust_checkpoint),
            num_images,
            seed,
            out_dir,
            chunk,
            use_ray,
            address,
            workers,
            progress,
            threads,
            batch_size,
            dict(method=method, window=window, options=options, sampling=sampling),
        )
    out = out or Path("out.png")
    n = len(prompts) * num_images
    if n > MAX_SHEET_IMAGES:
        raise click.BadParameter(
            f"{len(prompts)} prompt(s) x {num_images} make {n} images, more than one sheet "
            f"holds ({MAX_SHEET_IMAGES}): use --prompts FILE --out-dir DIR for many images",
            param_hint="--num-images",
        )
    if n * size * size > MAX_SHEET_PIXELS:
        raise click.BadParameter(
            f"{size} for {n} image(s) makes a sheet of about {n * size * size:,} pixels, more "
            f"than {MAX_SHEET_PIXELS:,}: lower --size",
            param_hint="--size",
        )
    check_seeds(seed, n)
    check_outputs(out, stats_path, trace)
    fmt = image_format(out)
    check_method(method, window, options)
    _generate_sheet(
        prompts,
        (model_spec, device, trust_checkpoint),
        num_images,
        seed,
        out,
        fmt,
        size,
        stats_path,
        progress,
        threads,
        trace,
        dict(method=method, window=window, batch_size=batch_size, compile=compile_step, **options, **sampling),
    )


def _check_combination(prompts, prompts_file, use_ray, address, out, stats_path, threads, trace) -> None:
    """Flags that would be silently ignored together are refused instead."""
    if prompts_file and prompts:
        raise click.UsageError(
            f"give PROMPTS or --prompts FILE, not both (got {len(prompts)} prompt(s) and --prompts {prompts_file})"
        )
    if not prompts_file and not prompts:
        raise click.UsageError("give PROMPTS or --prompts FILE")
    if prompts_file or use_ray:
        flag = "--out" if out else "--stats" if stats_path else None
        if flag:
            raise click.UsageError(
                f"{flag} writes one sheet; with --prompts/--ray every image goes to --out-dir "
                f"(and its statistics to --out-dir/stats.json)"
            )
        if trace:
            raise click.UsageError(
                "--trace draws one sheet's acceptance maps; with --prompts/--ray use "
                "`jacobigen bench` (acceptance.png) or the API's gen.stats.when"
            )
    if address and not use_ray:
        raise click.UsageError("--address names a Ray cluster: add --ray")
    if trace:
        extras.plots()  # before any image is generated
    if use_ray and threads is not None:
        raise click.UsageError("--threads sets this process's threads; Ray workers take cpu_count / --workers each")


def _load(model_spec, device, threads, trust_checkpoint=False):
    from .models.load import load_pipeline
    from .tools.threads import choose_threads

    pipe = load_pipeline(model_spec, device, trust_checkpoint)
    choose_threads(pipe.model, threads)
    if pipe.note:
        click.echo(f"model: {pipe.name} ({pipe.note})")
    return pipe


def _images_only(pipe):
    """``generate`` writes images: a clip model is pointed to ``generate-video``."""
    from .core.layout import VideoLayout

    if isinstance(pipe.layout, VideoLayout):
        raise ConfigError(f"the {pipe.name} model makes clips: use `jacobigen generate-video`")
    return pipe


def _generate_sheet(
    prompts, model, num_images, seed, out, fmt, size, stats_path, progress, threads, trace, gen_options
):
    """One sheet of images in ``out`` (and the statistics in ``stats_path``, the acceptance maps
    beside ``out`` with ``trace``); ``model`` is (spec, device, trust_checkpoint)."""
    pipe = _images_only(_load(*model[:2], threads, model[2]))
    texts = [p for p in prompts for _ in range(num_images)]
    seeds = image_seeds(seed, len(texts))
    gen, images = pipe.generate(texts, seed=seeds, progress=progress, **gen_options)
    buf = io.BytesIO()
    image_grid(images, size).save(buf, format=fmt)
    atomic_write(out, buf.getvalue(), "--out")
    _report(pipe, gen, texts, seeds, gen_options["window"], out, stats_path, trace)


def _report(pipe, gen, texts, seeds, window, out, stats_path, trace) -> None:
    """The stats line (NFE, step compression, wall time, tree), the statistics JSON and, with
    ``trace``, the acceptance maps beside ``out`` (a clip's frames side by side)."""
    from .core.layout import VideoLayout

    s = gen.stats
    ar_nfe = pipe.layout.length  # AR: one forward per generated token, the first from the prefill
    per_seq = sum(s.sequence_nfe) / len(s.sequence_nfe)
    kind = "lossless" if gen.method.lossless else "lossy"
    window = window if gen.method.window is None else gen.method.window
    what = "clip(s)" if isinstance(pipe.layout, VideoLayout) else "image(s)"
    spelled = "" if gen.method.name == gen.method.parts_text else f" = {gen.method.parts_text}"
    click.echo(f"method: {gen.method.name}{spelled} ({kind}), window {window}")
    click.echo(
        f"NFE: {s.nfe} forward passes for {len(texts)} {what}; per {what[:-3]} {per_seq:.1f} vs "
        f"{ar_nfe} for AR -> step compression {s.step_compression(ar_nfe):.2f}x"
    )
    split = "" if s.forward_time is None else f" (model forward {s.forward_time:.2f} s, other {s.overhead_time:.2f} s)"
    click.echo(f"wall time: {s.wall_time:.2f} s{split}")
    if gen.method.part("tree"):
        click.echo(
            f"tree: {s.nodes_per_iteration:.0f} nodes per forward, {sum(s.sibling_tokens)} token(s) from "
            f"off-spine nodes, {s.tokens_per_node:.3f} tokens per node"
        )
    if stats_path:
        record = {"method": gen.method.name, "parts": gen.method.parts_text, "ar_nfe": ar_nfe, **s.as_dict()}
        atomic_write(stats_path, json.dumps(record, indent=2).encode(), "--stats")
    click.echo(f"wrote {out}")
    if trace:
        traced = trace_path(out)
        titles = [f"{t} (seed {sd}): {n} passes" for t, sd, n in zip(texts, seeds, s.sequence_nfe, strict=True)]
        extras.plots().plot_acceptance(list(pipe.layout.tiled(s.when)), titles, traced)
        click.echo(f"wrote {traced}")


CLIP_FORMATS = {".gif": "GIF", ".png": "PNG", ".apng": "PNG", ".webp": "WEBP"}  # animated, by Pillow
MAX_CLIPS = 64  # clips in one --out file (tiled per frame)


@main.command("generate-video")
@click.argument("prompts", nargs=-1, required=True)
@decoding_options(
    "emoji-video",
    "'emoji-video' (embedded animated emoji, 8 frames), 'random-video' (random weights), or cosmos:DIR.",
)
@click.option(
    "--frames",
    type=click.IntRange(1, 1024),
    default=None,
    help="Frames per clip (default: the model's own; Cosmos' is fixed by its checkpoint).",
)
@click.option("--num-clips", default=1, show_default=True, type=click.IntRange(1, MAX_CLIPS), help="Clips per prompt.")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("clip.gif"),
    show_default=True,
    help="Animated .gif, .png (APNG) or .webp; several clips are tiled in every frame.",
)
@click.option(
    "--size", default=128, show_default=True, type=click.IntRange(8, MAX_SIZE), help="Width in pixels of each clip."
)
@click.option("--fps", default=4.0, show_default=True, type=Finite(0.1, 100), help="Frames per second.")
@click.option(
    "--trace",
    is_flag=True,
    help="Also write OUT's stem + .trace.png: which iteration committed each token, a clip's frames side by side.",
)
@THREADS
@TRUST
def generate_video(
    prompts,
    model_spec,
    device,
    method,
    window,
    seed,
    batch_size,
    cfg,
    temperature,
    top_k,
    top_p,
    options,
    stats_path,
    progress,
    frames,
    num_clips,
    out,
    size,
    fps,
    trace,
    threads,
    trust_checkpoint,
):
    """Generate clips for PROMPTS with any method and report how many forward passes it took."""
    options = options_of(options)
    sampling = {
        k: v for k, v in dict(cfg=cfg, temperature=temperature, top_k=top_k, top_p=top_p).items() if v is not None
    }
    n = len(prompts) * num_clips
    if n > MAX_CLIPS:
        raise click.BadParameter(
            f"{len(prompts)} prompt(s) x {num_clips} make {n} clips, more than one file holds ({MAX_CLIPS})",
            param_hint="--num-clips",
        )
    if out.suffix.lower() not in CLIP_FORMATS:
        raise BadInput(f"--out {out}: write an animated {', '.join(CLIP_FORMATS)} file")
    check_outputs(out, stats_path, trace)
    if trace:
        extras.plots()  # before any clip is generated
    seeds = check_seeds(seed, n)
    check_method(method, window, options)
    pipe = _load(model_spec, device, threads, trust_checkpoint).with_frames(frames)
    texts = [p for p in prompts for _ in range(num_clips)]
    gen, clips = pipe.generate(
        texts, seed=seeds, progress=progress, method=method, window=window, batch_size=batch_size, **options, **sampling
    )
    sheets = [image_grid(list(frame), size) for frame in zip(*clips, strict=True)]
    buf = io.BytesIO()
    sheets[0].save(
        buf,
        format=CLIP_FORMATS[out.suffix.lower()],
        save_all=True,
        append_images=sheets[1:],
        duration=round(1000 / fps),
        loop=0,
    )
    atomic_write(out, buf.getvalue(), "--out")
    _report(pipe, gen, texts, seeds, window, out, stats_path, trace)


def _generate_jobs(
    texts, model, num_images, seed, out_dir, chunk, use_ray, address, workers, progress, threads, batch_size, settings
):
    """One PNG and record per image in ``out_dir``, locally or on Ray; finished images are kept
    when their record matches ``settings`` (method, window, options, sampling) and the model
    (spec, device, trust_checkpoint)."""
    import time

    from tqdm.auto import tqdm

    from .decode.methods import get_method
    from .models.load import weights_id
    from .tools.jobs import Outputs, plan, run_local

    model_spec, device, trust_checkpoint = model
    spec = get_method(settings["method"])
    settings = {
        "model": model_spec,
        "weights": weights_id(model_spec),
        **settings,
        "method": spec.name,
        "window": spec.window or settings["window"],
    }
    jobs, outputs = plan(texts, num_images, seed), Outputs(out_dir, settings)
    with FolderLock(outputs.folder):  # held until this run ends: a second run on the folder stops here
        survey = outputs.survey(jobs)
        todo = sum(len(j) for j in survey.values())
        click.echo(f"{len(jobs)} image(s): {len(jobs) - todo} already in {out_dir}, {todo} to make")
        for reason, redo in survey.items():
            if reason != "missing":
                click.echo(f"  redoing {len(redo)} image(s) ({redo[0].name}.png ...): {reason}")
        bar = tqdm(total=todo, unit="img", disable=not progress)
        t0 = time.perf_counter()
        run: dict = {}
        gen_options = dict(method=spec.name, window=settings["window"], **settings["options"], **settings["sampling"])
        if not todo:
            pass
        elif use_ray:
            from .tools.distributed import run_ray

            run = run_ray(
                model_spec,
                jobs,
                outputs,
                workers=workers,
                address=address,
                device=device,
                chunk=chunk,
                batch_size=batch_size,
                on_result=lambda job, rec: bar.update(1),
                trust_checkpoint=trust_checkpoint,
                **gen_options,
            )
        else:
            from .tools.jobs import run_local

            pipe = _images_only(_load(model_spec, device, threads, trust_checkpoint))
            run_local(pipe, jobs, outputs, batch_size, chunk, on_result=lambda job, rec: bar.update(1), **gen_options)
        bar.close()
        wall = time.perf_counter() - t0
        summary = outputs.summarise(jobs, made=todo, wall_time=wall, **run)
        click.echo(
            f"{summary['images']} image(s) in {out_dir}; made {todo} in {wall:.1f} s "
            f"({summary['images_per_second']:.2f} images/s, {summary['image_tokens_per_second']:.0f} "
            f"image tokens/s); step compression {summary['step_compression']:.2f}x; "
            f"wrote {out_dir / 'stats.json'}"
        )


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
    from .decode.methods import parse_variant, split_variants
    from .tools.bench import PLAIN

    names = split_variants(value)
    if not names:
        raise click.BadParameter(f"give at least one method, got {value!r}")
    try:
        for name in names:
            if name != PLAIN:
                parse_variant(name)
    except JacobigenError as e:
        raise click.BadParameter(str(e)) from e
    return names


@main.command()
@click.option("--model", "model_spec", default="default", show_default=True)
@click.option("--device", default=None, help="cpu, cuda, ... (default: cuda if available).")
@click.option(
    "--methods",
    "method_names",
    default="sjd,scd-mc,scd-gs,sjd-pac,sjd-vp,scd-mc+pac+vp",
    show_default=True,
    callback=_variants,
    help="Comma-separated presets (ar and the plain loop plain-ar always run); a preset with options "
    "is written NAME[key=value,...], e.g. 'sjd-pac[tree_budget=full,window=32]'.",
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
@TRUST
def bench(
    model_spec,
    device,
    method_names,
    windows,
    n_prompts,
    prompt_texts,
    n_seeds,
    n_fid,
    out_dir,
    thread_counts,
    use_compile,
    compile_backend,
    trust_checkpoint,
):
    """Compare methods on the same prompts and seeds; write bench.json and bench.md."""
    from .models.load import load_pipeline
    from .tools.bench import run_fid, run_settings, write_reports

    if thread_counts is not None and not all(isinstance(t, int) and t >= 1 for t in thread_counts or [0]):
        raise click.BadParameter("thread counts must be >= 1", param_hint="--threads")
    if n_prompts < 1 or n_seeds < 1:
        raise click.BadParameter("--prompts and --seeds must be >= 1")
    if n_fid == 1:
        raise click.BadParameter("FID needs at least 2 images", param_hint="--fid")
    if compile_backend is not None and not use_compile:
        raise click.BadParameter("--compile-backend needs --compile", param_hint="--compile-backend")
    check_writable(out_dir, "--out", folder=True)
    pipe = load_pipeline(model_spec, device, trust_checkpoint)
    if pipe.note:
        click.echo(f"model: {pipe.name} ({pipe.note})")
    prompts = list(prompt_texts) or (pipe.example_prompts * n_prompts)[:n_prompts]
    if not prompts:
        raise BadInput(f"the {pipe.name} model has no example prompts: give one or more --prompt")
    if n_fid:
        from .core.layout import VideoLayout
        from .tools.fid import network

        if isinstance(pipe.layout, VideoLayout):
            raise click.BadParameter(f"FID scores images; the {pipe.name} model makes clips", param_hint="--fid")

        network()  # fail before the timing runs when the eval extra is missing
    results = run_settings(
        pipe,
        thread_counts or [None],
        (compile_backend or True) if use_compile else False,
        method_names,
        windows,
        prompts,
        image_seeds(0, n_seeds),
        model_spec=model_spec,
    )
    if n_fid:  # image quality does not depend on threads or compilation: the first setting gets it
        rows, extra = next(iter(results.values()))
        extra.update(run_fid(pipe, rows, n_fid))
    text = write_reports(
        results, out_dir, {"model": pipe.name, "prompts": prompts, "seeds": n_seeds, "sampling": pipe.defaults}
    )
    click.echo(text)
    folders = "plots" if len(results) == 1 else f"a folder per setting ({', '.join(results)})"
    click.echo(f"wrote {out_dir}/: bench.json, bench.md and {folders}")


@main.command()
@click.option("--model", "model_spec", default="default", show_default=True)
@click.option("--device", default=None, help="cpu, cuda, ... (default: cuda if available).")
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
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-out/throughput"),
    show_default=True,
)
@THREADS
@TRUST
def throughput(
    model_spec, device, method_names, batch_sizes, n_images, window, repeats, out_dir, threads, trust_checkpoint
):
    """Images/s and tokens/s against batch size; write throughput.json, .md and .png."""
    from .tools.throughput import markdown, run_throughput, write_report

    if any(b < 1 for b in batch_sizes):
        raise click.BadParameter("batch sizes must be >= 1", param_hint="--batch")
    check_writable(out_dir, "--out", folder=True)
    pipe = _load(model_spec, device, threads, trust_checkpoint)
    rows, info = run_throughput(pipe, method_names, batch_sizes, n_images, window, repeats, model_spec=model_spec)
    write_report(rows, info, out_dir, {"model": pipe.name, "sampling": pipe.defaults, "window": window})
    click.echo(markdown(rows, info))
    click.echo(f"wrote {out_dir}/: throughput.json, throughput.md, throughput.png")


@main.command()
@click.option("--model", "model_spec", default="default", show_default=True)
@click.option("--device", default=None, help="cpu, cuda, ... (default: cuda if available).")
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
@THREADS
@TRUST
def analyze(model_spec, device, prompt_texts, n_seeds, window, out_dir, progress, threads, trust_checkpoint):
    """The seed papers' diagnostics on a model: coupling-strength and guidance sweeps, multi-step
    Hamming distance, accepted lengths, token locality and row dependency (PNG + JSON each)."""
    from .tools.analyze import run_all

    check_writable(out_dir, "--out", folder=True)
    pipe = _load(model_spec, device, threads, trust_checkpoint)
    prompts = list(prompt_texts) or pipe.example_prompts[:2]
    run_all(pipe, prompts, image_seeds(0, n_seeds), window, out_dir, progress, model_spec=model_spec)
    click.echo(f"wrote {out_dir}/: alpha, hamming, cfg, accepted, influence (.png and .json)")


@main.command()
def methods():
    """List method presets and the parts a method string joins with +, whether each is lossless,
    and their options."""
    from .core.registry import KINDS, PARTS
    from .decode.methods import LEFT_OUT, METHODS

    width = max(len(n) for n in [*METHODS, *PARTS])

    def line(name, lossless, description, options, indent=""):
        opts = ", ".join(f"{k}={v}" for k, v in options.items())
        kind = "lossless" if lossless else "lossy   "
        click.echo(f"{indent}{name:<{width}}  {kind}  {description}" + (f"  [{opts}]" if opts else ""))

    for m in METHODS.values():
        line(m.name, m.lossless, m.description, m.options)
    left_out = ", ".join(f"a {kind} {name}" for kind, name in LEFT_OUT.items())
    click.echo(f"\nparts, joined by + into a method string (e.g. scd-gs+pac+vp; left out: {left_out}):")
    for p in sorted(PARTS.values(), key=lambda p: KINDS.index(p.kind)):
        line(p.name, p.lossless, f"{p.kind}: {p.description}", p.options, "  ")


if __name__ == "__main__":
    main()
