"""Reading files this process did not write (a cache, a step table, a job's records): bounded,
never blocking, strict JSON, and a clear :class:`ConfigError` for anything else."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path

from .errors import ConfigError

FILE_KINDS = {  # what is at a path that is not a regular file, in words
    stat.S_IFDIR: "folder",
    stat.S_IFCHR: "device",
    stat.S_IFBLK: "device",
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
    stat.S_IFLNK: "symlink",
}


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX flags; 0 where the platform has none (Windows)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def read_bounded(path: Path, limit: int, what: str, follow: bool = False) -> bytes:
    """At most ``limit`` bytes of a regular file (a :class:`ConfigError` for anything else, in words:
    a folder, a FIFO (opened without blocking), a device; a symlink unless ``follow``, a symlink loop;
    a longer file is refused unread)."""
    try:
        fd = os.open(path, os.O_RDONLY | NONBLOCK | CLOEXEC | (0 if follow else NOFOLLOW))
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {_why(path, e, follow)}") from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = FILE_KINDS.get(stat.S_IFMT(mode), "special file")
            raise ConfigError(f"{what} {path} is a {kind}, not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ConfigError(f"{what} {path} is larger than {limit} bytes")
    return data


def _why(path: Path, error: OSError, follow: bool) -> str:
    """Why a file did not open: a symlink not followed is named as one, not as a loop."""
    if error.errno == errno.ELOOP and os.path.islink(path):
        try:
            os.stat(path)
        except OSError:
            return "it is a symlink loop"
        if not follow:
            return "it is a symlink, and this file is never read through one"
    return error.strerror or str(error)


def parse_json(data: bytes) -> object:
    """Strict JSON: NaN and infinities are refused, and so is nesting too deep to parse."""

    def constant(name):
        raise ValueError(f"{name} is not a number JSON allows")

    try:
        return json.loads(data, parse_constant=constant)
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        raise ConfigError(f"not JSON ({type(e).__name__}: {str(e)[:80]})") from None


def positive(value, what: str) -> float:
    """A finite number > 0 (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what} must be a finite number > 0, got {value!r:.40}")
    return float(value)


def within(value, low: float, high: float, what: str) -> float:
    """A finite number in [low, high]: what a figure can be, not just > 0 (``nfe: 1e-300`` in a step
    table made a 300-digit speedup)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(f"{what} must be a number from {low:g} to {high:g}, got {value!r:.40}")
    return float(value)
