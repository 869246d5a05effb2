"""Many images as jobs: one image per (prompt, seed), each written the moment it exists, so that a
rerun after a crash (or on more machines) redoes only what is missing.

``out/NNNNN.png`` is the image and ``out/NNNNN.json`` its record: everything that determines the
image (model and weights, method, window, options, sampling, prompt, seed) and what it cost. Both
are written under a temporary name and renamed, the record last, so a record marks a finished job
and a killed run never leaves a truncated file. A rerun keeps an image only if its record matches
the run's settings and its PNG decodes; it redoes any other, and says why. ``out/stats.json``
sums the records of a run.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from PIL import Image

from ..core.checks import image_seeds
from ..core.errors import JacobigenError
from ..core.stats import step_compression
from ..models.bundle import ModelBundle
from .files import atomic_write, check_writable, sweep_temporaries


@dataclass(frozen=True)
class Job:
    index: int
    prompt: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.index:05d}"


def plan(prompts: list[str], num_images: int = 1, seed: int = 0) -> list[Job]:
    """Job i is image i: prompts in order, ``num_images`` each, seed ``seed + i``."""
    texts = [p for p in prompts for _ in range(num_images)]
    return [Job(i, p, s) for i, (p, s) in enumerate(zip(texts, image_seeds(seed, len(texts)), strict=True))]


def chunks(jobs: list[Job], size: int) -> list[list[Job]]:
    return [jobs[i : i + size] for i in range(0, len(jobs), size)]


class Outputs:
    """The output folder of a job run; ``settings`` are what determines an image besides its
    prompt and seed (model, weights, method, window, options, sampling)."""

    def __init__(self, folder: str | Path, settings: dict | None = None, notes: dict | None = None):
        self.folder = check_writable(folder, "output folder", folder=True)
        self.settings = json.loads(json.dumps(settings or {}))  # as a record will read back
        self.notes = notes or {}  # written into each record, not compared (``auto``: what was asked)
        sweep_temporaries(self.folder)

    def _record_path(self, job: Job) -> Path:
        return self.folder / f"{job.name}.json"

    def expected(self, job: Job) -> dict:
        return {**self.settings, "prompt": job.prompt, "seed": job.seed}

    def why_redo(self, job: Job) -> str:
        """Why ``job`` must be made: '' when its image is on disk, decodes, and its record matches."""
        try:
            rec = json.loads(self._record_path(job).read_text())
        except FileNotFoundError:
            return "missing"
        except (OSError, ValueError):
            return "unreadable record"
        changed = [k for k, v in self.expected(job).items() if rec.get(k) != v]
        if changed:
            k = changed[0]
            return f"made with another {k} ({rec.get(k)!r}, now {self.expected(job)[k]!r})"
        try:
            with Image.open(self.folder / f"{job.name}.png") as img:
                img.verify()
        except Exception:  # noqa: BLE001 - missing, truncated or not an image: all mean redo
            return "image missing or does not decode"
        return ""

    def done(self, job: Job) -> bool:
        return not self.why_redo(job)

    def survey(self, jobs: Iterable[Job]) -> dict[str, list[Job]]:
        """Jobs to make, by reason (``missing``, or why an image on disk cannot be kept)."""
        out: dict[str, list[Job]] = {}
        for job in jobs:
            reason = self.why_redo(job)
            if reason:
                out.setdefault(reason, []).append(job)
        return out

    def pending(self, jobs: Iterable[Job]) -> list[Job]:
        return sorted((j for group in self.survey(jobs).values() for j in group), key=lambda j: j.index)

    def write(self, job: Job, png: bytes, record: dict) -> None:
        atomic_write(self.folder / f"{job.name}.png", png)
        atomic_write(
            self._record_path(job), json.dumps({**record, **self.notes, **self.expected(job)}, indent=2).encode()
        )

    def summarise(self, jobs: list[Job], made: int = 0, wall_time: float = 0.0, **run) -> dict:
        """Sum the records of ``jobs`` into ``stats.json``, with the rate of this run (``made``
        images in ``wall_time`` seconds) and its other figures ``run``."""
        recs = [json.loads(self._record_path(j).read_text()) for j in jobs if self.done(j)]
        nfe = sum(r["sequence_nfe"] for r in recs)
        ar = sum(r["ar_nfe"] for r in recs)
        per_image = recs[0]["image_tokens"] if recs else 0
        rate = made / wall_time if wall_time else 0.0
        summary = {
            "images": len(recs),
            "missing": len(jobs) - len(recs),
            "forward_passes_per_image": nfe / max(len(recs), 1),
            "step_compression": step_compression(ar, nfe),
            "methods": sorted({r["method"] for r in recs}),
            "images_made": made,
            "wall_time": wall_time,
            "images_per_second": rate,
            "image_tokens_per_second": rate * per_image,
            **run,
        }
        atomic_write(self.folder / "stats.json", json.dumps(summary, indent=2).encode())
        return summary


MAX_RECORD_BYTES = 1 << 20  # a record is a few hundred bytes


def started_with(folder: Path, jobs: list[Job], settings: dict, auto: dict) -> tuple[str, int] | None:
    """The (method, window) that ``--method auto`` chose when this job started: from the first record
    in ``folder`` of one of ``jobs`` that auto made with these ``settings`` (model, weights, options,
    sampling) when asked the same ``auto`` ({"method", "window"}); None when there is none."""
    from ..core.reading import read_bounded

    want = json.loads(json.dumps(settings))
    for job in jobs:
        try:
            rec = json.loads(read_bounded(folder / f"{job.name}.json", MAX_RECORD_BYTES, "record"))
        except (ValueError, RecursionError, JacobigenError):
            continue
        if not isinstance(rec, dict) or rec.get("auto") != auto or any(rec.get(k) != v for k, v in want.items()):
            continue
        method, window = rec.get("method"), rec.get("window")
        if isinstance(method, str) and isinstance(window, int) and not isinstance(window, bool) and window >= 1:
            return method, window
    return None


def render(pipe: ModelBundle, jobs: list[Job], batch_size: int | None = None, **options) -> list[tuple[bytes, dict]]:
    """Decode ``jobs`` together (continuous refill past ``batch_size``); a PNG and a record each."""
    gen, images = pipe.generate([j.prompt for j in jobs], seed=[j.seed for j in jobs], batch_size=batch_size, **options)
    s = gen.stats
    out = []
    for job, img, nfe in zip(jobs, images, s.sequence_nfe, strict=True):
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        out.append(
            (
                buf.getvalue(),
                {
                    **asdict(job),
                    "method": gen.method.name,
                    "lossless": gen.method.lossless,
                    "sequence_nfe": nfe,
                    "ar_nfe": pipe.layout.length,
                    "image_tokens": pipe.layout.cells,
                    "batch_wall_time": s.wall_time,
                    "batch_images": len(jobs),
                    "worker_pid": os.getpid(),
                },
            )
        )
    return out


def run_local(
    pipe: ModelBundle,
    jobs: list[Job],
    outputs: Outputs,
    batch_size: int | None,
    chunk: int,
    on_result: Callable[[Job, dict], None] | None = None,
    **options,
) -> None:
    """Render the pending jobs in this process, ``chunk`` jobs per decode call."""
    for part in chunks(outputs.pending(jobs), chunk):
        for job, (png, record) in zip(part, render(pipe, part, batch_size, **options), strict=True):
            outputs.write(job, png, record)
            if on_result:
                on_result(job, record)
