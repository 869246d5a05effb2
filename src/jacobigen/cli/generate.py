"""``jacobigen generate``: one sheet of images, or one PNG + record per image in a folder (locally
or on Ray, resumable)."""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass
from pathlib import Path

import click
from click.core import ParameterSource

from ..tools.files import FolderLock, atomic_write, check_writable, read_prompts
from .group import BadInput, main
from .options import Decoding, ModelChoice, decoding_options, model_options
from .params import check_prompts
from .report import check_outputs, image_format, image_grid, images_only, report

MAX_IMAGES = 1_000_000  # --num-images
MAX_SHEET_IMAGES = 256  # images in one --out sheet (more: --prompts FILE --out-dir DIR)
MAX_SIZE = 4096  # --size, pixels per image
MAX_SHEET_PIXELS = 1 << 28  # the whole sheet (768 MiB as RGB)


@dataclass(frozen=True)
class Folder:
    """Where a --prompts/--ray run writes, and how it splits the work."""

    out_dir: Path
    chunk: int
    use_ray: bool
    address: str | None
    workers: int


@main.command()
@click.argument("prompts", nargs=-1)
@model_options(
    "default",
    "'default' ('emoji-names': the embedded model fitted to the 257 names people try first), 'emoji' "
    "(embedded, trained on all 13,216 images), "
    "'random' (random weights), or FAMILY:PATH.",
)
@decoding_options()
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
@click.option("--force", is_flag=True, help="Replace a read-only --out or --stats file (refused otherwise).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the memory plan (weights at their dtype or --quantize, KV cache, buffers, activations, against "
    "the free memory) and exit without loading weights.",
)
def generate(
    prompts,
    model: ModelChoice,
    decoding: Decoding,
    num_images,
    out,
    size,
    prompts_file,
    out_dir,
    chunk,
    use_ray,
    address,
    workers,
    trace,
    compile_step,
    force,
    dry_run,
):
    """Generate images for PROMPTS and report how many forward passes it took."""
    folder_run = prompts_file is not None or use_ray
    if compile_step and folder_run:
        raise click.UsageError("--compile applies to one sheet; --prompts/--ray runs decode eagerly")
    _check_combination(prompts, prompts_file, use_ray, address, out, decoding, model, trace)
    check_prompts(prompts)
    if folder_run:
        if click.get_current_context().get_parameter_source("size") is not ParameterSource.DEFAULT:
            raise click.UsageError("--size sets the tiles of one sheet; --prompts/--ray write each image as made")
        texts = read_prompts(prompts_file) if prompts_file else list(prompts)
        n = len(texts) * num_images
        if n > MAX_IMAGES:
            raise click.BadParameter(
                f"{len(texts)} prompt(s) x {num_images} make {n:,} images, more than one run makes "
                f"({MAX_IMAGES:,}): split the prompts over several runs",
                param_hint="--num-images",
            )
        decoding.seeds(n)
        _check_out_dir(out_dir, dry_run)
        from ..tools.jobs import check_folder

        check_folder(out_dir, n, prompts_file)
        decoding.check_method()
        if use_ray:  # Ray workers are other machines, each loading its own model
            if dry_run:
                click.echo(
                    f"memory plan: each of the {workers} Ray worker(s) loads {model.spec} on its own machine: "
                    "run this command there without --ray for its plan"
                )
        else:
            model.check_memory(decoding, min(n, chunk), dry_run)
        if dry_run:
            click.echo(f"dry run: {n} image(s) would go to {out_dir}; nothing made")
            return
        return _generate_folder(texts, num_images, model, decoding, Folder(out_dir, chunk, use_ray, address, workers))
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
    seeds = decoding.seeds(n)
    check_outputs(out, decoding.stats_path, trace, force)
    fmt = image_format(out)
    decoding.check_method()
    model.check_memory(decoding, n, dry_run)  # before any weight loads
    if dry_run:
        return
    bundle = images_only(model.load())
    decoding, choice = decoding.resolve(bundle, prompts[0])
    texts = [p for p in prompts for _ in range(num_images)]
    gen, images = bundle.generate(texts, **decoding.generate_kwargs(seed=seeds, compile=compile_step))
    if choice is not None and len(texts) == 1 and not compile_step:  # a measurement beats a prediction
        from ..decode.auto import cache_file, remember

        remember(choice, gen.stats.wall_time, cache_file())
    buf = io.BytesIO()
    made = {"prompts": texts, "seeds": seeds, "method": gen.method.name, "model": bundle.name}
    image_grid(images, size).save(buf, format=fmt, **made_by(fmt, made))
    atomic_write(out, buf.getvalue(), "--out")
    report(bundle, gen, texts, seeds, decoding, out, trace, choice)


def made_by(fmt: str, made: dict) -> dict:
    """A PNG's record of what made it (a ``jacobigen`` text chunk: prompts, seeds, method, model, and
    the commit it ran from), so a shipped picture can be checked against the code, as a result
    JSON is; other formats carry none."""
    if fmt != "PNG":
        return {}
    from PIL.PngImagePlugin import PngInfo

    from ..tools.threads import git_commit

    info = PngInfo()
    info.add_text("jacobigen", json.dumps({**made, **git_commit()}))
    return {"pnginfo": info}


def _check_out_dir(out_dir: Path, dry_run: bool) -> None:
    """--out-dir writable before any work; a dry run creates nothing, so it checks the nearest folder
    that exists instead of a missing --out-dir."""
    if not dry_run or out_dir.exists():
        check_writable(out_dir, "--out-dir", folder=True)
        return
    existing = next(p for p in out_dir.absolute().parents if p.exists())
    if not existing.is_dir():
        raise BadInput(f"cannot write --out-dir {out_dir}: {existing} is not a folder")
    check_writable(existing, "--out-dir's folder", folder=True)


def _check_combination(prompts, prompts_file, use_ray, address, out, decoding, model, trace) -> None:
    """Flags that would be silently ignored together are refused instead."""
    if prompts_file and prompts:
        raise click.UsageError(
            f"give PROMPTS or --prompts FILE, not both (got {len(prompts)} prompt(s) and --prompts {prompts_file})"
        )
    if not prompts_file and not prompts:
        raise click.UsageError("give PROMPTS or --prompts FILE")
    if prompts_file or use_ray:
        flag = "--out" if out else "--stats" if decoding.stats_path else None
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
    if use_ray and (decoding.method == "auto" or decoding.window is None):
        raise click.UsageError(
            "--ray: name --method and --window (auto measures this machine, not the workers'; "
            "`jacobigen bench --window auto` on a worker tells what runs fastest there)"
        )
    if use_ray and model.quantize:
        raise click.UsageError("--quantize applies to this process's model: Ray workers load their own, unquantized")
    if use_ray and model.dtype:
        raise click.UsageError("--dtype applies to this process's model: Ray workers load their own at its default")
    if use_ray and model.threads is not None:
        raise click.UsageError("--threads sets this process's threads; Ray workers take cpu_count / --workers each")


def _generate_folder(texts, num_images, model: ModelChoice, decoding: Decoding, folder: Folder):
    """One PNG and record per image in the folder, locally or on Ray; finished images are kept
    when their record matches the settings (method, window, options, sampling) and the model
    (spec, device, trust_checkpoint)."""
    from tqdm.auto import tqdm

    from ..decode.methods import get_method
    from ..models.load import weights_id
    from ..tools.jobs import Outputs, plan, run_local, started_with

    asked = {"method": decoding.method, "window": decoding.window}  # what auto was asked to weigh
    auto = asked if decoding.method == "auto" or decoding.window is None else None
    settings: dict = {
        "model": model.spec,
        "weights": weights_id(model.spec),
        "quantize": model.quantize,  # the target: an image made for another (int8, or full precision) is redone
        "dtype": model.dtype,  # the target too: None is the model's default dtype
        "options": decoding.options,
        "sampling": decoding.sampling,
    }
    jobs = plan(texts, num_images, decoding.seed)
    # held until this run ends: a second run on the folder stops here, before any model loads or measures
    with FolderLock(folder.out_dir):
        bundle = None
        if not folder.use_ray:  # Ray workers load their own (and Ray runs name their method and window)
            bundle = images_only(model.load())
            kept = started_with(folder.out_dir, jobs, settings, auto) if auto else None
            decoding, _ = decoding.resolve(bundle, texts[0], kept)
        spec = get_method(decoding.method)
        window = spec.window or decoding.window
        settings = {**settings, "method": spec.name, "window": window}
        outputs = Outputs(folder.out_dir, settings, {"auto": auto} if auto else None)
        survey = outputs.survey(jobs)
        todo = sum(len(j) for j in survey.values())
        click.echo(f"{len(jobs)} image(s): {len(jobs) - todo} already in {folder.out_dir}, {todo} to make")
        for reason, redo in survey.items():
            if reason != "missing":
                click.echo(f"  redoing {len(redo)} image(s) ({redo[0].name}.png ...): {reason}")
        bar = tqdm(total=todo, unit="img", disable=not decoding.progress)
        t0 = time.perf_counter()
        run: dict = {}
        gen_options = dict(
            method=spec.name,
            window=window,
            deterministic=decoding.determinism,
            cuda_graphs=decoding.cuda_graphs,
            same_as_ar=decoding.same_as_ar,
            **decoding.options,
            **decoding.sampling,
        )
        if not todo:
            pass
        elif folder.use_ray:
            from ..tools.distributed import run_ray

            run = run_ray(
                model.spec,
                jobs,
                outputs,
                workers=folder.workers,
                address=folder.address,
                device=model.device,
                chunk=folder.chunk,
                batch_size=decoding.batch_size,
                on_result=lambda job, rec: bar.update(1),
                trust_checkpoint=model.trust_checkpoint,
                **gen_options,
            )
        else:
            assert bundle is not None  # loaded above for a local run
            on_result = lambda job, rec: bar.update(1)  # noqa: E731
            run_local(bundle, jobs, outputs, decoding.batch_size, folder.chunk, on_result=on_result, **gen_options)
        bar.close()
        wall = time.perf_counter() - t0
        summary = outputs.summarise(jobs, made=todo, wall_time=wall, **run)
        click.echo(
            f"{summary['images']} image(s) in {folder.out_dir}; made {todo} in {wall:.1f} s "
            f"({summary['images_per_second']:.2f} images/s, {summary['image_tokens_per_second']:.0f} "
            f"image tokens/s); step compression {summary['step_compression']:.2f}x; "
            f"wrote {folder.out_dir / 'stats.json'}"
        )
