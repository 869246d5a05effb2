"""What a generating command writes: the image sheet, the stats line, the statistics JSON and the
acceptance maps, with every output path checked before any work."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from ..core.errors import ConfigError
from ..tools import extras
from ..tools.files import atomic_write, check_writable, distinct
from .group import BadInput
from .options import Decoding


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


def trace_path(out: Path) -> Path:
    return out.with_name(out.stem + ".trace.png")


def check_outputs(out: Path, stats_path: Path | None, trace: bool, force: bool = False) -> None:
    """--out, --stats and --trace's file, before any work: each a regular file (or a symlink to one,
    followed) or nothing yet, writable (a read-only one only with ``force``), and no two of them the
    same file."""
    named = {"--out": out, "--stats": stats_path, "--trace": trace_path(out) if trace else None}
    distinct(named)
    for what, path in named.items():
        if path is not None:
            check_writable(path, what, force=force)
    if trace:
        extras.plots()  # before any image is generated


def images_only(bundle):
    """``generate`` writes images: a clip model is pointed to ``generate-video``."""
    from ..core.layout import VideoLayout

    if isinstance(bundle.layout, VideoLayout):
        raise ConfigError(f"the {bundle.name} model makes clips: use `jacobigen generate-video`")
    return bundle


def report(bundle, gen, texts, seeds, decoding: Decoding, out: Path, trace: bool, choice=None) -> None:
    """The stats line (NFE, step compression, wall time, tree), the statistics JSON and, with
    ``trace``, the acceptance maps beside ``out`` (a clip's frames side by side); with an auto
    ``choice``, its predicted and measured speed against ``ar``'s calibrated time per image."""
    from ..core.layout import VideoLayout

    s = gen.stats
    ar_nfe = bundle.layout.length  # AR: one forward per generated token, the first from the prefill
    per_seq = sum(s.sequence_nfe) / len(s.sequence_nfe)
    kind = "lossless" if gen.method.lossless else "lossy"
    window = decoding.window if gen.method.window is None else gen.method.window
    what = "clip(s)" if isinstance(bundle.layout, VideoLayout) else "image(s)"
    spelled = "" if gen.method.name == gen.method.parts_text else f" = {gen.method.parts_text}"
    # whose distribution: the quantized model's, else the dtype's (--dtype's default varies by CPU)
    weights = f"; weights {s.quantize} (the target is the quantized model)" if s.quantize else ""
    weights = weights or (f"; {s.dtype}" if s.dtype else "")
    click.echo(f"method: {gen.method.name}{spelled} ({kind}), window {window}{weights}")
    click.echo(f"seed: {seed_text(seeds)}{same_line(gen.method, decoding.determinism, choice is not None)}")
    click.echo(
        f"NFE: {s.nfe} forward passes for {len(texts)} {what}; per {what[:-3]} {per_seq:.1f} vs "
        f"{ar_nfe} for AR -> step compression {s.step_compression(ar_nfe):.2f}x"
    )
    split = "" if s.forward_time is None else f" (model forward {s.forward_time:.2f} s, other {s.overhead_time:.2f} s)"
    click.echo(f"wall time: {s.wall_time:.2f} s{split}")
    if choice is not None:
        speed = speed_line(choice, s.wall_time / len(texts), what[:-3])
        if speed:
            click.echo(speed)
    if gen.method.part("tree"):
        click.echo(
            f"tree: {s.nodes_per_iteration:.0f} nodes per forward, {sum(s.sibling_tokens)} token(s) from "
            f"off-spine nodes, {s.tokens_per_node:.3f} tokens per node"
        )
    if decoding.stats_path:
        record = {
            "method": gen.method.name,
            "window": window,
            "parts": gen.method.parts_text,
            "auto": _auto_record(choice) if choice is not None else None,
            "ar_nfe": ar_nfe,
            "seeds": list(seeds),
            "same_as_ar": gen.method.same_as_ar,
            "deterministic": decoding.determinism,
            **s.as_dict(),
        }
        atomic_write(decoding.stats_path, json.dumps(record, indent=2).encode(), "--stats")
    click.echo(f"wrote {out}")
    if trace:
        traced = trace_path(out)
        titles = [f"{t} (seed {sd}): {n} passes" for t, sd, n in zip(texts, seeds, s.sequence_nfe, strict=True)]
        extras.plots().plot_acceptance(list(bundle.layout.tiled(s.when)), titles, traced)
        click.echo(f"wrote {traced}")


def seed_text(seeds) -> str:
    """The seeds of the images, in order: ``0`` or ``0-5`` (image i has seed + i) or a list."""
    seeds = list(seeds)
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]} (image i has seed {seeds[0]} + i)"
    return ", ".join(map(str, seeds))


def same_line(method, deterministic: bool, auto: bool = False) -> str:
    """What the same seed gives again (docs/exactness.md, "Same seed, same image"); ``auto``: the
    method was auto's choice, which follows this machine's timings."""
    if method.window == 1:
        if deterministic:
            return "; any lossless method and window with --same-as-ar draws these tokens"
        return "; --same-as-ar (deterministic) draws ar's tokens with any lossless method and window"
    if not method.same_as_ar and auto:
        return (
            "; auto chose the method from this machine's timings, and another choice draws another sample of "
            "the same distribution (--same-as-ar: ar's own image whatever it picks)"
        )
    if not method.same_as_ar:
        return (
            "; the same command and seed give the same image here; another method or window draws another "
            "sample of the same distribution (--same-as-ar: ar's own image)"
        )
    if deterministic and method.part("tree"):  # a node's ancestors sit behind its siblings' slots
        return "; ar's own tokens for this seed, bit for bit but where a tree node's attention rounds otherwise"
    if deterministic:
        return "; ar's own tokens for this seed, bit for bit, whatever the method, window or batch"
    return "; ar's tokens for this seed wherever a block rounds as a single token does (--deterministic: bit for bit)"


def speed_line(choice, per_image: float, what: str = "image") -> str | None:
    """This run against ``ar``: a measured ratio only when ``ar``'s time was measured here too (a
    predicted ``ar`` ran 15-28% high, so "measured 1.33x" stood for a side-by-side 1.02x); none when
    auto ran ``ar`` itself, or knows no time for it."""
    if choice.method == "ar" or not math.isfinite(choice.ar_seconds):
        return None
    if choice.ar_measured:
        return (
            f"speed against ar: measured {choice.ar_seconds / per_image:.2f}x ({per_image:.2f} s per {what}; "
            f"ar {choice.ar_seconds:.2f} s, measured here); predicted {choice.speedup:.2f}x"
        )
    return (
        f"speed against ar: predicted {choice.speedup:.2f}x ({per_image:.2f} s per {what}; ar "
        f"{choice.ar_seconds:.2f} s, predicted here: a measured ratio needs ar measured too)"
    )


def _auto_record(choice) -> dict:
    """What ``--stats`` says about an auto choice: the pair, why, the figures behind it (each candidate's
    forwards per image and their source), and the table learned from this model's decodes here, this
    run's images included."""
    from ..decode import learned

    def finite(x):
        return x if math.isfinite(x) else None

    entry = learned.load(learned.learned_file()).get(choice.learned) if choice.learned else None
    figures = entry["figures"] if entry else {}

    return {
        "method": choice.method,
        "window": choice.window,
        "reason": choice.reason,
        "step_table": str(choice.table) if choice.table else None,
        "predicted_seconds": finite(choice.seconds),
        "ar_seconds": finite(choice.ar_seconds),
        "ar_measured": choice.ar_measured,
        "predicted_speedup": choice.speedup,
        "candidates": {k: finite(v) for k, v in choice.predicted.items()},
        "measured_seconds": choice.measured,
        "forwards": choice.steps,
        "learned": {
            k: {"images": f.images, "nfe": round(f.nfe, 2), "spread": round(f.spread, 2)} for k, f in figures.items()
        },
    }
