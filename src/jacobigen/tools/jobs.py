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
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from ..core.checks import image_seeds
from ..core.errors import ConfigError, JacobigenError
from .files import FILE_KINDS, atomic_write, check_writable, sweep_temporaries

if TYPE_CHECKING:  # torch-free at import: the command line checks a folder before torch loads
    from ..models.bundle import ModelBundle


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


RUN_FILES = ("stats.json", ".jacobigen.lock")  # besides the jobs' files: the summary and FolderLock's file
JOB_FILE = re.compile(r"(\d{5,})\.(png|json)")


def written_by(name: str, count: int) -> bool:
    """Whether a run of ``count`` jobs writes (or locks) the file ``name`` in its folder."""
    m = JOB_FILE.fullmatch(name)
    return name in RUN_FILES or (m is not None and int(m[1]) < count and f"{int(m[1]):05d}" == m[1])


def check_folder(folder: Path, count: int, prompts_file: Path | None = None) -> None:
    """Every file a run of ``count`` jobs writes in ``folder``, checked before any work: a regular
    file (or a symlink to one) or nothing, since a folder, FIFO or device there would fail (or block)
    only once images are made; and the ``prompts_file`` the run reads is none of them."""
    if prompts_file is not None:
        path = Path(os.path.realpath(prompts_file))
        if path.parent == Path(os.path.realpath(folder)) and written_by(path.name, count):
            raise ConfigError(
                f"--prompts {prompts_file} lies in --out-dir {folder} under a name the run writes (images, records, "
                "stats.json, its lock): move it, or pick another --out-dir"
            )
    if not folder.is_dir():
        return  # a dry run creates nothing
    with os.scandir(folder) as entries:
        for entry in entries:
            if not written_by(entry.name, count):
                continue
            try:
                mode = os.stat(entry.path).st_mode
            except FileNotFoundError:  # a dangling symlink: writing creates its target
                continue
            except OSError as e:
                raise ConfigError(f"cannot use {entry.path} in --out-dir: {e.strerror or e}") from e
            if not stat.S_ISREG(mode):
                kind = FILE_KINDS.get(stat.S_IFMT(mode), "special file")
                raise ConfigError(
                    f"{entry.path} is a {kind}, where the run writes a file: move it away, or pick another --out-dir"
                )


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
        return self._why(job)[1]

    def _why(self, job: Job) -> tuple[str, str]:
        """(the kind of reason, the reason in words with the first value that differs)."""
        try:
            rec = json.loads(self._record_path(job).read_text())
        except FileNotFoundError:
            return "missing", "missing"
        except (OSError, ValueError):
            return "unreadable", "unreadable record"
        expected = self.expected(job)
        changed = [k for k, v in expected.items() if rec.get(k) != v]
        if changed:
            k = changed[0]
            if k == "quantize":  # None is the full-precision target
                was, now = (v or "none (full precision)" for v in (rec.get(k), expected[k]))
                return k, f"made for another target (quantize {was}, now {now})"
            return k, f"made with another {k} ({rec.get(k)!r}, now {expected[k]!r})"
        try:
            with Image.open(self.folder / f"{job.name}.png") as img:
                img.verify()
        except Exception:  # noqa: BLE001 - missing, truncated or not an image: all mean redo
            return "image", "image missing or does not decode"
        return "", ""

    def done(self, job: Job) -> bool:
        return not self.why_redo(job)

    def survey(self, jobs: Iterable[Job]) -> dict[str, list[Job]]:
        """Jobs to make, by reason (``missing``, or why an image on disk cannot be kept): one entry per
        kind of reason, in the words of its first image (a shifted seed is one entry, not one per image)."""
        out: dict[str, list[Job]] = {}
        words: dict[str, str] = {}
        for job in jobs:
            kind, reason = self._why(job)
            if kind:
                out.setdefault(words.setdefault(kind, reason), []).append(job)
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
        from ..core.stats import step_compression  # torch: only once images exist

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
            return _auto_could_choose(folder / f"{job.name}.json", method, window, auto)
    return None


def _auto_could_choose(record: Path, method: str, window: int, auto: dict) -> tuple[str, int]:
    """The (method, window) of ``record`` if auto, asked ``auto``, could have chosen it: a lossless
    method (the one named, when one was) at the window asked. An edited record is refused rather than
    resumed with a method the run did not ask for."""
    from ..decode.methods import get_method

    asked, asked_window = auto.get("method"), auto.get("window")
    try:
        spec = get_method(method)
        fits = (
            spec.lossless
            and (window == spec.window if spec.window else asked_window in (None, window))  # ar: window 1
            and (asked == "auto" or spec.name == get_method(asked).name)
        )
    except ConfigError:
        fits = False
    if not fits:
        named = "" if asked == "auto" else f", {asked}"
        at = "" if asked_window is None else f" at window {asked_window}"
        raise ConfigError(
            f"{record} says --method {asked} chose {method} at window {window}, which it never chooses "
            f"(a lossless method{named}{at}): the record was edited; delete it, or name --method and --window"
        )
    return spec.name, window


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
