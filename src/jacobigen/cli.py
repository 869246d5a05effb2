"""Command line: ``jacobigen generate``, ``bench``, ``throughput``, ``methods``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
from PIL import Image

from .errors import JacobigenError
from .methods import METHODS, parse_options, parse_variant, split_variants
from .threads import choose_threads


def image_grid(images: list[Image.Image], size: int) -> Image.Image:
    """Images scaled to ``size`` pixels wide (nearest neighbour: tokens stay visible), tiled."""
    images = [img.resize((size, round(size * img.height / img.width)), Image.NEAREST) for img in images]
    cols = math.ceil(math.sqrt(len(images)))
    rows = math.ceil(len(images) / cols)
    w, h = images[0].size
    sheet = Image.new("RGB", (cols * w, rows * h), "white")
    for i, img in enumerate(images):
        sheet.paste(img, ((i % cols) * w, (i // cols) * h))
    return sheet


def options_of(pairs: tuple[str, ...]) -> dict:
    """``-o key=value`` pairs as method options."""
    try:
        return parse_options(pairs)
    except JacobigenError as e:
        raise click.BadParameter(str(e), param_hint="--option") from e


THREADS = click.option(
    "--threads", type=click.IntRange(min=1), default=None,
    help="Torch CPU threads (default: 1 for a model under 50M parameters on the CPU, where a second "
         "OpenMP thread stalls whenever the other core is busy; else torch's default).")

TRUST = click.option(
    "--trust-checkpoint", is_flag=True,
    help="Let pickled checkpoints that hold Python objects load (LlamaGen's training checkpoints store "
         "their argparse.Namespace). Unpickling can run code: only for files you trust.")


@click.group()
@click.version_option(package_name="jacobigen")
def main():
    """Fast, exact Jacobi decoding for autoregressive image generators."""


@main.command()
@click.argument("prompts", nargs=-1)
@click.option("--model", "model_spec", default="default", show_default=True,
              help="'default' (embedded emoji model), 'random' (random weights), or FAMILY:PATH.")
@click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available).")
@click.option("--method", default="sjd", show_default=True, help="Method preset (see `jacobigen methods`).")
@click.option("--window", default=32, show_default=True, type=int, help="Tokens in flight per iteration.")
@click.option("--seed", default=0, show_default=True, type=int, help="Image i gets seed SEED + i.")
@click.option("--num-images", default=1, show_default=True, type=int, help="Images per prompt.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Images decoded together (default: all); finished rows take the next prompt.")
@click.option("--cfg", type=float, default=None, help="Classifier-free guidance scale.")
@click.option("--temperature", type=float, default=None)
@click.option("--top-k", type=int, default=None)
@click.option("--top-p", type=float, default=None)
@click.option("--option", "-o", "options", multiple=True, help="Method hyper-parameter, KEY=VALUE.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("out.png"),
              show_default=True, help="PNG to write (a grid when several images).")
@click.option("--size", default=256, show_default=True, type=click.IntRange(min=8),
              help="Width in pixels of each image in the PNG.")
@click.option("--stats", "stats_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the decoding statistics as JSON.")
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File with one prompt per line: one PNG + JSON record per image in --out-dir; "
                   "a rerun skips finished images.")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("jacobigen-out"),
              show_default=True, help="Output folder for --prompts / --ray runs.")
@click.option("--chunk", default=16, show_default=True, type=click.IntRange(min=1),
              help="Images per decode call in --prompts / --ray runs (outputs land per chunk).")
@click.option("--ray", "use_ray", is_flag=True, help="Fan the images out to Ray workers.")
@click.option("--address", default=None, help="Ray cluster address (default: start a local instance).")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(min=1), help="Ray workers.")
@click.option("--progress/--no-progress", default=True, show_default=True)
@click.option("--trace", is_flag=True,
              help="Also write OUT's stem + .trace.png: which iteration committed each token, per image.")
@THREADS
@TRUST
def generate(prompts, model_spec, device, method, window, seed, num_images, batch_size, cfg, temperature,
             top_k, top_p, options, out, size, stats_path, prompts_file, out_dir, chunk, use_ray, address,
             workers, progress, threads, trust_checkpoint, trace):
    """Generate images for PROMPTS and report how many forward passes it took."""
    from .models import load_pipeline

    try:
        if num_images < 1:
            raise click.BadParameter("must be >= 1", param_hint="--num-images")
        gen_options = dict(method=method, window=window, batch_size=batch_size, **options_of(options),
                           **{k: v for k, v in dict(cfg=cfg, temperature=temperature, top_k=top_k,
                                                    top_p=top_p).items() if v is not None})
        if prompts_file or use_ray:
            return _generate_jobs(prompts, prompts_file, model_spec, device, num_images, seed, out_dir, chunk,
                                  use_ray, address, workers, progress, threads, gen_options, trust_checkpoint)
        if not prompts:
            raise click.UsageError("give PROMPTS or --prompts FILE")
        pipe = load_pipeline(model_spec, device, trust_checkpoint)
        choose_threads(pipe.model, threads)
        if pipe.note:
            click.echo(f"model: {pipe.name} ({pipe.note})")
        texts = [p for p in prompts for _ in range(num_images)]
        gen, images = pipe.generate(texts, seed=[seed + i for i in range(len(texts))], progress=progress,
                                    **gen_options)
    except JacobigenError as e:
        raise click.ClickException(str(e)) from e
    out.parent.mkdir(parents=True, exist_ok=True)
    image_grid(images, size).save(out)
    s = gen.stats
    ar_nfe = pipe.layout.length  # AR: one forward per generated token, the first from the prefill
    per_seq = sum(s.sequence_nfe) / len(s.sequence_nfe)
    kind = "lossless" if gen.method.lossless else "lossy"
    click.echo(f"method: {gen.method.name} ({kind}), window {window if gen.method.window is None else gen.method.window}")
    click.echo(f"NFE: {s.nfe} forward passes for {len(texts)} image(s); per image {per_seq:.1f} vs "
               f"{ar_nfe} for AR -> step compression {ar_nfe / per_seq:.2f}x")
    split = "" if s.forward_time is None else \
        f" (model forward {s.forward_time:.2f} s, other {s.overhead_time:.2f} s)"
    click.echo(f"wall time: {s.wall_time:.2f} s{split}")
    if gen.method.tree:
        click.echo(f"tree: {s.nodes_per_iteration:.0f} nodes per forward, {sum(s.sibling_tokens)} token(s) from "
                   f"off-spine nodes, {s.tokens_per_node:.3f} tokens per node")
    if stats_path:
        stats_path.write_text(json.dumps({"method": gen.method.name, "ar_nfe": ar_nfe, **s.as_dict()}, indent=2))
    click.echo(f"wrote {out}")
    if trace:
        from .plots import plot_acceptance

        trace_path = out.with_name(out.stem + ".trace.png")
        titles = [f"{t} (seed {seed + i}): {n} passes" for i, (t, n) in enumerate(zip(texts, s.sequence_nfe))]
        plot_acceptance(list(pipe.layout.grid(s.when)), titles, trace_path)
        click.echo(f"wrote {trace_path}")


def _generate_jobs(prompts, prompts_file, model_spec, device, num_images, seed, out_dir, chunk, use_ray,
                   address, workers, progress, threads, gen_options, trust_checkpoint):
    """One PNG and record per image in ``out_dir``, locally or on Ray; finished images are skipped."""
    import time

    from tqdm.auto import tqdm

    from .jobs import Outputs, plan, read_prompts, run_local

    if use_ray and threads is not None:
        raise click.UsageError("--threads sets this process's threads; Ray workers take cpu_count / --workers each")
    texts = read_prompts(prompts_file) if prompts_file else list(prompts)
    if not texts:
        raise click.UsageError("give PROMPTS or --prompts FILE")
    jobs, outputs = plan(texts, num_images, seed), Outputs(out_dir)
    todo = len(outputs.pending(jobs))
    click.echo(f"{len(jobs)} image(s): {len(jobs) - todo} already in {out_dir}, {todo} to make")
    bar = tqdm(total=todo, unit="img", disable=not progress)
    t0 = time.perf_counter()
    run: dict = {}
    if not todo:
        pass
    elif use_ray:
        from .distributed import run_ray

        run = run_ray(model_spec, jobs, outputs, workers=workers, address=address, device=device, chunk=chunk,
                      on_result=lambda job, rec: bar.update(1), trust_checkpoint=trust_checkpoint, **gen_options)
    else:
        from .models import load_pipeline

        pipe = load_pipeline(model_spec, device, trust_checkpoint)
        choose_threads(pipe.model, threads)
        if pipe.note:
            click.echo(f"model: {pipe.name} ({pipe.note})")
        run_local(pipe, jobs, outputs, gen_options.pop("batch_size"), chunk,
                  on_result=lambda job, rec: bar.update(1), **gen_options)
    bar.close()
    wall = time.perf_counter() - t0
    summary = outputs.summarise(jobs, made=todo, wall_time=wall, **run)
    click.echo(f"{summary['images']} image(s) in {out_dir}; made {todo} in {wall:.1f} s "
               f"({summary['images_per_second']:.2f} images/s, {summary['image_tokens_per_second']:.0f} "
               f"image tokens/s); step compression {summary['step_compression']:.2f}x; "
               f"wrote {out_dir / 'stats.json'}")


def _csv(kind):
    def parse(ctx, param, value):
        if value is None:
            return None
        try:
            return [v if v == "auto" else kind(v) for v in value.split(",") if v]
        except ValueError as e:
            raise click.BadParameter(str(e)) from e
    return parse


def _variants(ctx, param, value):
    from .bench import PLAIN

    names = split_variants(value)
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
@click.option("--methods", "method_names", default="sjd,scd-mc,scd-gs,sjd-pac,sjd-vp,scd-mc+pac+vp",
              show_default=True, callback=_variants,
              help="Comma-separated presets (ar and the plain loop plain-ar always run); a preset with options "
                   "is written NAME[key=value,...], e.g. 'sjd-pac[tree_budget=full,window=32]'.")
@click.option("--window", "windows", default="16,32,64", show_default=True, callback=_csv(int),
              help="Comma-separated windows; 'auto' picks one per method from this device's costs.")
@click.option("--prompts", "n_prompts", default=2, show_default=True, type=int,
              help="How many of the model's example prompts to use.")
@click.option("--seeds", "n_seeds", default=1, show_default=True, type=int)
@click.option("--fid", "n_fid", default=0, show_default=True, type=click.IntRange(min=0),
              help="Images per row for FID vs ar and vs held-out data (0: off; needs jacobigen[eval]).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("bench-out"), show_default=True)
@click.option("--threads", "thread_counts", default=None, callback=_csv(int),
              help="Comma-separated torch CPU thread counts: the whole bench runs once per count, each in "
                   "OUT/threads-N/ when there are several (default: one run, 1 thread for a model under 50M "
                   "parameters on the CPU, else torch's default).")
@click.option("--compile", "use_compile", is_flag=True,
              help="Also run the bench with the model forward under torch.compile(dynamic=True), in "
                   "OUT/threads-N-compiled/, compared against compiled ar and the compiled plain loop.")
@TRUST
def bench(model_spec, device, method_names, windows, n_prompts, n_seeds, n_fid, out_dir, thread_counts, use_compile,
          trust_checkpoint):
    """Compare methods on the same prompts and seeds; write bench.json and bench.md."""
    from .bench import run_fid, run_settings, write_reports
    from .models import load_pipeline

    try:
        if thread_counts is not None and not all(isinstance(t, int) and t >= 1 for t in thread_counts or [0]):
            raise click.BadParameter("thread counts must be >= 1", param_hint="--threads")
        pipe = load_pipeline(model_spec, device, trust_checkpoint)
        if pipe.note:
            click.echo(f"model: {pipe.name} ({pipe.note})")
        if n_prompts < 1 or n_seeds < 1:
            raise click.BadParameter("--prompts and --seeds must be >= 1")
        prompts = (pipe.example_prompts * n_prompts)[:n_prompts]
        if n_fid == 1:
            raise click.BadParameter("FID needs at least 2 images", param_hint="--fid")
        if n_fid:
            from .fid import network

            network()  # fail before the timing runs when the eval extra is missing
        results = run_settings(pipe, thread_counts or [None], use_compile, method_names, windows, prompts,
                               list(range(n_seeds)))
        if n_fid:  # image quality does not depend on threads or compilation: the first setting gets it
            rows, extra = next(iter(results.values()))
            extra.update(run_fid(pipe, rows, n_fid))
    except JacobigenError as e:
        raise click.ClickException(str(e)) from e
    text = write_reports(results, out_dir, {"model": pipe.name, "prompts": prompts, "seeds": n_seeds,
                                            "sampling": pipe.defaults})
    click.echo(text)
    folders = "plots" if len(results) == 1 else f"a folder per setting ({', '.join(results)})"
    click.echo(f"wrote {out_dir}/: bench.json, bench.md and {folders}")


@main.command()
@click.option("--model", "model_spec", default="default", show_default=True)
@click.option("--device", default=None, help="cpu, cuda, ... (default: cuda if available).")
@click.option("--methods", "method_names", default="ar,sjd-pac", show_default=True, callback=_csv(str),
              help="Comma-separated presets.")
@click.option("--batch", "batch_sizes", default="1,4,16", show_default=True, callback=_csv(int),
              help="Comma-separated batch sizes.")
@click.option("--images", "n_images", default=16, show_default=True, type=click.IntRange(min=1),
              help="Images per (method, batch size).")
@click.option("--window", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--repeats", default=1, show_default=True, type=click.IntRange(min=1),
              help="Runs per setting; the fastest is reported.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("bench-out/throughput"), show_default=True)
@THREADS
@TRUST
def throughput(model_spec, device, method_names, batch_sizes, n_images, window, repeats, out_dir, threads,
               trust_checkpoint):
    """Images/s and tokens/s against batch size; write throughput.json, .md and .png."""
    from .models import load_pipeline
    from .throughput import markdown, run_throughput, write_report

    try:
        if any(b < 1 for b in batch_sizes):
            raise click.BadParameter("batch sizes must be >= 1", param_hint="--batch")
        pipe = load_pipeline(model_spec, device, trust_checkpoint)
        choose_threads(pipe.model, threads)
        rows, info = run_throughput(pipe, method_names, batch_sizes, n_images, window, repeats)
    except JacobigenError as e:
        raise click.ClickException(str(e)) from e
    write_report(rows, info, out_dir, {"model": pipe.name, "sampling": pipe.defaults, "window": window})
    click.echo(markdown(rows, info))
    click.echo(f"wrote {out_dir}/: throughput.json, throughput.md, throughput.png")


@main.command()
@click.option("--model", "model_spec", default="default", show_default=True)
@click.option("--device", default=None, help="cpu, cuda, ... (default: cuda if available).")
@click.option("--prompt", "prompt_texts", multiple=True,
              help="A prompt to measure on (repeatable; default: the model's first two example prompts).")
@click.option("--seeds", "n_seeds", default=4, show_default=True, type=click.IntRange(min=1),
              help="Images per prompt, seeds 0..N-1.")
@click.option("--window", default=32, show_default=True, type=click.IntRange(min=2))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("analyze-out"), show_default=True)
@click.option("--progress/--no-progress", default=True, show_default=True)
@THREADS
@TRUST
def analyze(model_spec, device, prompt_texts, n_seeds, window, out_dir, progress, threads, trust_checkpoint):
    """The seed papers' diagnostics on a model: coupling-strength and guidance sweeps, multi-step
    Hamming distance, accepted lengths, token locality and row dependency (PNG + JSON each)."""
    from .analyze import run_all
    from .models import load_pipeline

    try:
        pipe = load_pipeline(model_spec, device, trust_checkpoint)
        choose_threads(pipe.model, threads)
        prompts = list(prompt_texts) or pipe.example_prompts[:2]
        run_all(pipe, prompts, list(range(n_seeds)), window, out_dir, progress)
    except JacobigenError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"wrote {out_dir}/: alpha, hamming, cfg, accepted, influence (.png and .json)")


@main.command()
def methods():
    """List method presets, whether each is lossless, and their options."""
    width = max(len(n) for n in METHODS)
    for m in METHODS.values():
        kind = "lossless" if m.lossless else "lossy   "
        opts = ", ".join(f"{k}={v}" for k, v in m.options.items())
        click.echo(f"{m.name:<{width}}  {kind}  {m.description}" + (f"  [{opts}]" if opts else ""))
