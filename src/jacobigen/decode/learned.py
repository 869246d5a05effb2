"""Forward passes per image learned where the model runs: the step table a user's own decodes write.

A lossless method's forwards per image depend on the weights, the sampling, the dtype (bfloat16 rounds
some draws otherwise) and the image's length, not on the machine. So every lossless decode adds its
images' counts here (one small locked, atomic write per decode call, beside the calibration cache), and
``auto`` (:mod:`.auto`) prefers these figures, with their count and spread, to a shipped or ``bench
--steps`` table: many images make the user's own prompt mix the table.

The file is a cache like :mod:`.calibration`: what cannot be read as this version's is ignored with a
warning and rewritten, a path that is not a regular file is refused, at most ``MAX_MODELS`` models are
kept (the least recently used go first).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from ..core.errors import ConfigError
from ..core.quantize import quantized_as
from ..core.reading import parse_json, read_bounded, within
from .calibration import LOCK_SECONDS, cache_file, check_cache, write_atomic
from .steps import fingerprint, sampling_key

FORMAT = "jacobigen-learned-steps"
VERSION = 1
MAX_BYTES = 1 << 20
MAX_MODELS = 64
MAX_FIGURES = 64  # (method, window) pairs per model key


def learned_file() -> Path:
    """``learned.json`` beside the calibration cache (``$JACOBIGEN_CACHE``)."""
    return cache_file().with_name("learned.json")


def model_key(model, length: int, sampling: dict) -> str:
    """What a figure holds for: the weights' fingerprint, their dtype (and quantization: int8 weights
    draw a few tokens otherwise), the image's length, the sampling."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    quantized = quantized_as(model)
    dtype += f"+{quantized}" if quantized else ""
    return f"{fingerprint(model)} | {dtype} | length={length} | {sampling_key(sampling)}"


@dataclass(frozen=True)
class Figure:
    """Forwards per image over ``images`` images: their mean, sum of squared deviations, least and most."""

    images: int
    nfe: float
    m2: float = 0.0
    low: float = math.inf
    high: float = 0.0

    @property
    def spread(self) -> float:
        """The sample standard deviation of forwards per image (0 for one image)."""
        return math.sqrt(self.m2 / (self.images - 1)) if self.images > 1 else 0.0

    def add(self, values: list[float]) -> Figure:
        """This figure with ``values`` (one per image) merged in (Chan's parallel update: exact mean and m2)."""
        n = len(values)
        if not n:
            return self
        mean = sum(values) / n
        m2 = sum((v - mean) ** 2 for v in values)
        total = self.images + n
        delta = mean - self.nfe
        return Figure(
            total,
            self.nfe + delta * n / total,
            self.m2 + m2 + delta * delta * self.images * n / total,
            min(self.low, *values),
            max(self.high, *values),
        )

    def as_dict(self) -> dict:
        return {"images": self.images, "nfe": self.nfe, "m2": self.m2, "min": self.low, "max": self.high}


def _figure(row: object, where: str) -> Figure:
    if not isinstance(row, dict) or set(row) != {"images", "nfe", "m2", "min", "max"}:
        raise ConfigError(f"{where} holds exactly images, nfe, m2, min and max")
    images = row["images"]
    if isinstance(images, bool) or not isinstance(images, int) or images < 1:
        raise ConfigError(f"{where}.images must be a whole number >= 1")
    low, high = (within(row[k], 1, 1e9, f"{where}.{k}") for k in ("min", "max"))
    nfe, m2 = within(row["nfe"], 1, 1e9, f"{where}.nfe"), within(row["m2"], 0, 1e30, f"{where}.m2")
    return Figure(images, nfe, m2, low, high)


def load(path: Path) -> dict[str, dict]:
    """Model key -> {"used": time, "figures": {"method@window": Figure}}; {} for a missing file, and
    for one that is not this version's (with a warning: the next record rewrites it)."""
    try:
        data = parse_json(read_bounded(path, MAX_BYTES, "learned steps"))
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
            raise ConfigError(f"not a version {VERSION} {FORMAT} file")
        if not isinstance(data.get("models"), dict) or len(data["models"]) > MAX_MODELS:
            raise ConfigError(f"models must be a table of at most {MAX_MODELS}")
        out = {}
        for key, entry in data["models"].items():
            if not isinstance(entry, dict) or set(entry) != {"used", "figures"}:
                raise ConfigError(f"{key!r} holds exactly used and figures")
            if not isinstance(entry["figures"], dict):
                raise ConfigError(f"{key!r} holds exactly used and figures")
            figures = {str(k): _figure(v, f"{key}: {k}") for k, v in entry["figures"].items()}
            out[str(key)] = {"used": within(entry["used"], 0, 1e12, "used"), "figures": figures}
        return out
    except ConfigError as e:
        if not path.exists() and not path.is_symlink():
            return {}
        warnings.warn(f"learned steps {path} ignored and rewritten: {e}", stacklevel=3)
        return {}


def _text(models: dict) -> bytes:
    keep = sorted(models.items(), key=lambda kv: kv[1]["used"], reverse=True)[:MAX_MODELS]
    rows = {
        k: {"used": v["used"], "figures": {n: f.as_dict() for n, f in list(v["figures"].items())[-MAX_FIGURES:]}}
        for k, v in keep
    }
    return json.dumps({"format": FORMAT, "version": VERSION, "models": rows}, indent=1).encode()


def record(model, length: int, sampling: dict, name: str, nfe: list[int], path: Path | None = None) -> None:
    """Add the forwards per image of one decode call's images (``nfe``, one per image) of ``name``
    ("method@window") to the model's figures: locked, merged with what another process wrote meanwhile,
    atomic. A record that cannot be kept (read-only cache, lock held too long) warns; the run goes on."""
    path = path or learned_file()
    key = model_key(model, length, sampling)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        check_cache(path)
        with FileLock(path.with_name(path.name + ".lock"), timeout=LOCK_SECONDS):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                models = load(path)
            entry = models.setdefault(key, {"used": 0.0, "figures": {}})
            figures = entry["figures"]
            figures[name] = figures.pop(name, Figure(0, 0.0)).add([float(n) for n in nfe])  # newest last
            entry["used"] = time.time()
            write_atomic(path, _text(models))
    except Timeout:
        warnings.warn(f"forwards not learned: {path} stayed locked by another run", stacklevel=2)
    except (OSError, ConfigError) as e:
        warnings.warn(f"forwards not learned: {e}", stacklevel=2)


def figures(model, length: int, sampling: dict, path: Path | None = None) -> dict[str, Figure]:
    """This model's learned figures ("method@window" -> :class:`Figure`) for this length and sampling."""
    entry = load(path or learned_file()).get(model_key(model, length, sampling))
    return dict(entry["figures"]) if entry else {}


def everything(path: Path | None = None) -> list[tuple[str, int, dict[str, Figure]]]:
    """(model key, image length, figures) of every model learned here: the comparable layouts a prior
    draws on (this model's own other candidates included)."""
    return [
        (key, int(key.split(" | ")[2].removeprefix("length=")), entry["figures"])
        for key, entry in load(path or learned_file()).items()
    ]
