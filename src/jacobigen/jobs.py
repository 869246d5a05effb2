"""Many images as jobs: one image per (prompt, seed), each written the moment it exists, so that a
rerun after a crash (or on more machines) redoes only what is missing.

``out/NNNNN.png`` is the image and ``out/NNNNN.json`` its record (prompt, seed, method, forward
passes); the record is written last, so its presence marks a finished job. ``out/stats.json``
sums the records of a run.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

from .errors import ConfigError
from .pipeline import Pipeline


@dataclass(frozen=True)
class Job:
    index: int
    prompt: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.index:05d}"


def read_prompts(path: str | Path) -> list[str]:
    """One prompt per line; blank lines and lines starting with '#' are skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read prompts file {path}: {e.strerror or e}") from e
    prompts = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not prompts:
        raise ConfigError(f"prompts file {path} holds no prompts")
    return prompts


def plan(prompts: list[str], num_images: int = 1, seed: int = 0) -> list[Job]:
    """Job i is image i: prompts in order, ``num_images`` each, seed ``seed + i``."""
    texts = [p for p in prompts for _ in range(num_images)]
    return [Job(i, p, seed + i) for i, p in enumerate(texts)]


def chunks(jobs: list[Job], size: int) -> list[list[Job]]:
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


class Outputs:
    """The output folder of a job run."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _record_path(self, job: Job) -> Path:
        return self.folder / f"{job.name}.json"

    def done(self, job: Job) -> bool:
        """Finished earlier with this prompt and seed (a changed prompt file redoes the job)."""
        try:
            rec = json.loads(self._record_path(job).read_text())
        except (OSError, ValueError):
            return False
        return (rec.get("prompt"), rec.get("seed")) == (job.prompt, job.seed) and \
            (self.folder / f"{job.name}.png").exists()

    def pending(self, jobs: Iterable[Job]) -> list[Job]:
        return [j for j in jobs if not self.done(j)]

    def write(self, job: Job, png: bytes, record: dict) -> None:
        _atomic(self.folder / f"{job.name}.png", png)
        _atomic(self._record_path(job), json.dumps(record, indent=2).encode())

    def summarise(self, jobs: list[Job], made: int = 0, wall_time: float = 0.0, **run) -> dict:
        """Sum the records of ``jobs`` into ``stats.json``, with the rate of this run (``made``
        images in ``wall_time`` seconds) and its other figures ``run``."""
        recs = [json.loads(self._record_path(j).read_text()) for j in jobs if self.done(j)]
        nfe = sum(r["sequence_nfe"] for r in recs)
        ar = sum(r["ar_nfe"] for r in recs)
        per_image = recs[0]["image_tokens"] if recs else 0
        rate = made / wall_time if wall_time else 0.0
        summary = {"images": len(recs), "missing": len(jobs) - len(recs),
                   "forward_passes_per_image": nfe / max(len(recs), 1),
                   "step_compression": ar / nfe if nfe else 0.0,
                   "methods": sorted({r["method"] for r in recs}),
                   "images_made": made, "wall_time": wall_time, "images_per_second": rate,
                   "image_tokens_per_second": rate * per_image, **run}
        (self.folder / "stats.json").write_text(json.dumps(summary, indent=2))
        return summary


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def render(pipe: Pipeline, jobs: list[Job], batch_size: int | None = None, **options) -> list[tuple[bytes, dict]]:
    """Decode ``jobs`` together (continuous refill past ``batch_size``); a PNG and a record each."""
    gen, images = pipe.generate([j.prompt for j in jobs], seed=[j.seed for j in jobs],
                                batch_size=batch_size, **options)
    s = gen.stats
    out = []
    for job, img, nfe in zip(jobs, images, s.sequence_nfe):
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        out.append((buf.getvalue(), {**asdict(job), "method": gen.method.name, "lossless": gen.method.lossless,
                                     "sequence_nfe": nfe, "ar_nfe": pipe.layout.length,
                                     "image_tokens": pipe.layout.rows * pipe.layout.cols,
                                     "batch_wall_time": s.wall_time, "batch_images": len(jobs),
                                     "worker_pid": os.getpid()}))
    return out


def run_local(pipe: Pipeline, jobs: list[Job], outputs: Outputs, batch_size: int, chunk: int,
              on_result: Callable[[Job, dict], None] | None = None, **options) -> None:
    """Render the pending jobs in this process, ``chunk`` jobs per decode call."""
    for part in chunks(outputs.pending(jobs), chunk):
        for job, (png, record) in zip(part, render(pipe, part, batch_size, **options)):
            outputs.write(job, png, record)
            if on_result:
                on_result(job, record)
