"""Checks of user settings, shared by the parts that own them: each error names the setting, the
value it got and the range it needs, so that a bad value never surfaces later as a torch error.
Torch-free, so that the command line can check its arguments before loading a model."""

from __future__ import annotations

import json
import math
import operator

from .errors import ConfigError

SAMPLING_KEYS = ("cfg", "temperature", "top_k", "top_p")  # the sampling a caller may set, everywhere


def _range(lo, hi, lo_open: bool = False) -> str:
    if lo is None and hi is None:
        return ""
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo}"
    if lo is None:
        return f"<= {hi}"
    return f"in {'(' if lo_open else '['}{lo}, {hi}]"


def integer(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int (NumPy integers welcome; bools, floats and text are not)."""
    need = " ".join(filter(None, ("an integer", _range(lo, hi))))
    try:
        if isinstance(value, bool):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        raise ConfigError(f"{name} must be {need}, got {value!r}") from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ConfigError(f"{name} must be {need}, got {v}")
    return v


def number(name: str, value, lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> float:
    """``value`` as a finite float (no NaN, no inf, no bool or text)."""
    try:
        if isinstance(value, (bool, str, bytes)):
            raise TypeError
        v = float(value)
    except (TypeError, ValueError):
        bounds = f" {_range(lo, hi, lo_open)}" if lo is not None or hi is not None else ""
        raise ConfigError(f"{name} must be a finite number{bounds}, got {value!r}") from None
    low = lo is not None and (v <= lo if lo_open else v < lo)
    if not math.isfinite(v) or low or (hi is not None and v > hi):
        what = f" {_range(lo, hi, lo_open)}" if lo is not None or hi is not None else ""
        raise ConfigError(f"{name} must be a finite number{what}, got {value!r}")
    return v


def text(name: str, value: str) -> str:
    """``value`` as text UTF-8 can encode: a lone surrogate (bytes that were not UTF-8, decoded by
    Python with ``surrogateescape`` as in ``sys.argv``, or a JSON escape such as ``"\\ud800"``) is
    refused here rather than where a tokenizer meets it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        char = ord(value[e.start])
        what = f"byte 0x{char - 0xDC00:02x}" if 0xDC80 <= char <= 0xDCFF else f"a lone surrogate U+{char:04X}"
        raise ConfigError(f"{name} is not UTF-8 text ({what} at character {e.start + 1}): give it as UTF-8") from None
    return value


MAX_SEED = 2**32 - 1  # seeds are 32-bit keys of the counter-based generator (rng.py)


def image_seeds(seed, n: int, what: str = "image") -> list[int]:
    """The one seeding rule of the API and every command: image (sequence) i of a run gets the seed
    ``seed + i``. Every seed must be a 32-bit key, so none wraps silently."""
    first = integer("seed", seed, 0, MAX_SEED)
    if first + n - 1 > MAX_SEED:
        raise ConfigError(
            f"seed {first} with {n} {what}(s) ({what} i gets seed + i) passes the largest seed "
            f"{MAX_SEED}: use a seed <= {MAX_SEED - n + 1}"
        )
    return [first + i for i in range(n)]


def parse_options(pairs) -> dict:
    """``key=value`` texts to options (``-`` in keys read as ``_``); values parsed as JSON where they
    parse (numbers, booleans), else kept as text. The part that owns an option checks its type."""
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected key=value, got {pair!r}")
        name = key.strip().replace("-", "_")
        if name in out:
            raise ConfigError(f"option {name} is given twice ({out[name]!r} and {value.strip()!r}): give it once")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value.strip()
    return out
