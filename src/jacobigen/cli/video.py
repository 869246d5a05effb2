"""``jacobigen generate-video``: clips of the embedded video model (or Cosmos) in one animated file."""

from __future__ import annotations

import io
from pathlib import Path

import click

from ..tools.files import atomic_write
from .group import BadInput, main
from .options import Decoding, ModelChoice, decoding_options, model_options
from .params import Finite, check_prompts
from .report import check_outputs, image_grid, report

CLIP_FORMATS = {".gif": "GIF", ".png": "PNG", ".apng": "PNG", ".webp": "WEBP"}  # animated, by Pillow
MAX_CLIPS = 64  # clips in one --out file (tiled per frame)
MAX_SIZE = 4096  # --size, pixels per clip
DEFAULT_VIDEO_MODEL = "emoji-names-video"  # one of models.load.VIDEO_MODELS; a name, so the CLI starts without torch


@main.command("generate-video")
@click.argument("prompts", nargs=-1, required=True)
@model_options(
    DEFAULT_VIDEO_MODEL,
    "'emoji-names-video' (embedded animated emoji of the curated names, 8 frames), 'emoji-video' (animated "
    "emoji of four art sets), 'random-video' (random weights), or cosmos:DIR.",
)
@decoding_options("scd-gs+copy", "32")  # fastest lossless on the embedded clip model (benchmarks/video-emoji)
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
@click.option("--force", is_flag=True, help="Replace a read-only --out or --stats file (refused otherwise).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the memory plan (weights at their dtype or --quantize, KV cache, buffers, activations, against "
    "the free memory) and exit without loading weights.",
)
def generate_video(
    prompts, model: ModelChoice, decoding: Decoding, frames, num_clips, out, size, fps, trace, force, dry_run
):
    """Generate clips for PROMPTS with any method and report how many forward passes it took."""
    check_prompts(prompts)
    n = len(prompts) * num_clips
    if n > MAX_CLIPS:
        raise click.BadParameter(
            f"{len(prompts)} prompt(s) x {num_clips} make {n} clips, more than one file holds ({MAX_CLIPS})",
            param_hint="--num-clips",
        )
    if out.suffix.lower() not in CLIP_FORMATS:
        raise BadInput(f"--out {out}: write an animated {', '.join(CLIP_FORMATS)} file")
    check_outputs(out, decoding.stats_path, trace, force)
    seeds = decoding.seeds(n)
    decoding.check_method()
    model.check_memory(decoding, n, dry_run)  # before any weight loads
    if dry_run:
        return
    bundle = model.load().with_frames(frames)
    texts = [p for p in prompts for _ in range(num_clips)]
    gen, clips = bundle.generate(texts, **decoding.generate_kwargs(seed=seeds))
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
    report(bundle, gen, texts, seeds, decoding, out, trace)
