"""The calibration cache: what ``--method auto`` measured on this machine, kept so the next run
need not measure again. It is a cache, nothing more:

- whatever cannot be read as this version's records (unreadable, malformed, foreign, another
  version, too large) is ignored with one warning, and rewritten at the next save;
- anything at its path that is not a regular file (a FIFO, a device, a folder, a symlink: a write
  never goes through a link into another file) is refused with a :class:`ConfigError` before any
  work (:func:`check_cache`); reads are bounded and never block;
- saves take a lock beside the file (filelock: portable, no fcntl), merge with what another process
  saved meanwhile, keep at most ``MAX_RECORDS`` records (the least recently used go first) and write a
  temporary file that is renamed over the old one.

A record holds, per machine key (:func:`jacobigen.decode.auto.machine_key`): ``curve`` (seconds
of one forward per block size), ``bookkeeping`` (seconds per iteration outside the forward, per
``method@window``), ``measured`` (seconds per image of runs auto chose, per ``method@window|sampling``)
and ``used`` (when it was last read or written).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
import warnings
from pathlib import Path

import platformdirs
from filelock import FileLock, Timeout

from ..core.errors import ConfigError
from ..core.reading import CLOEXEC, FILE_KINDS, NOFOLLOW, parse_json, positive, read_bounded, within

FORMAT = "jacobigen-calibration"
# of the records: a change of what a record holds starts them afresh (3: curves in the decode's cache;
# 4: the bookkeeping of tables as wide as the id span, measured afresh)
VERSION = 4
MAX_BYTES = 1 << 20
MAX_RECORDS = 32
MAX_ENTRIES = 64  # per field of a record
LOCK_SECONDS = 10.0
SECONDS = (1e-6, 1e6)  # a forward or an image timed here: no run is faster than a microsecond


def cache_file() -> Path:
    """``$JACOBIGEN_CACHE/calibration.json`` (default: the platform's user cache folder for jacobigen,
    from platformdirs: ``$XDG_CACHE_HOME/jacobigen`` or ``~/.cache/jacobigen`` on Linux,
    ``~/Library/Caches/jacobigen`` on macOS, ``%LOCALAPPDATA%\\jacobigen\\Cache`` on Windows); ``~`` is
    expanded."""
    root = os.environ.get("JACOBIGEN_CACHE") or platformdirs.user_cache_dir("jacobigen", appauthor=False)
    return Path(root).expanduser() / "calibration.json"


def check_cache(path: Path) -> None:
    """Refuse, before any work, a cache path that holds anything but a regular file (or nothing)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:  # a parent that is a file, no permission: the save will warn, reads find nothing
        if e.errno in (errno.ENOTDIR, errno.EACCES):
            return
        raise ConfigError(f"calibration cache {path}: {e.strerror or e}") from e
    if stat.S_ISREG(mode):
        return
    kind = FILE_KINDS.get(stat.S_IFMT(mode), "special file")
    if stat.S_ISLNK(mode):
        try:
            os.stat(path)
        except OSError as e:
            if e.errno == errno.ELOOP:
                kind = "symlink loop"
    raise ConfigError(
        f"calibration cache {path} is a {kind}, not a regular file: remove it, or set JACOBIGEN_CACHE to a "
        "folder of its own (the cache is never read through or written into anything else)"
    )


def _record(rec: object) -> dict:
    if not isinstance(rec, dict) or set(rec) != {"used", "curve", "bookkeeping", "measured"}:
        raise ConfigError("a record holds exactly used, curve, bookkeeping and measured")
    positive(rec["used"], "used")
    for field in ("curve", "bookkeeping", "measured"):
        table = rec[field]
        if not isinstance(table, dict) or len(table) > MAX_ENTRIES:
            raise ConfigError(f"{field} must be a table of at most {MAX_ENTRIES} numbers")
        for k, v in table.items():
            if field == "bookkeeping":  # may be 0
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e6:
                    raise ConfigError(f"bookkeeping[{k!r}] must be a number >= 0, got {v!r:.40}")
            else:
                within(v, *SECONDS, f"{field}[{k!r}]")
    if not all(str(k).isdigit() and int(k) >= 1 for k in rec["curve"]):
        raise ConfigError("curve keys must be block sizes >= 1")
    return rec


def load(path: Path | None) -> tuple[dict, bool]:
    """(records by key, whether the file must be rewritten). A file that is not this version's cache
    gives no records and one warning."""
    if path is None:
        return {}, False
    try:
        data = parse_json(read_bounded(path, MAX_BYTES, "calibration cache"))
        if not isinstance(data, dict) or set(data) != {"format", "version", "records"} or data["format"] != FORMAT:
            raise ConfigError("not a jacobigen calibration cache")
        if data["version"] != VERSION:
            raise ConfigError(f"version {data['version']!r}, this jacobigen writes {VERSION}")
        if not isinstance(data["records"], dict) or len(data["records"]) > MAX_RECORDS:
            raise ConfigError(f"records must be a table of at most {MAX_RECORDS}")
        return {str(k): _record(v) for k, v in data["records"].items()}, False
    except ConfigError as e:
        if not path.exists() and not path.is_symlink():
            return {}, False
        warnings.warn(f"calibration cache {path} ignored and rewritten: {e}", stacklevel=3)
        return {}, True


def _bounded(records: dict) -> dict:
    keep = sorted(records.items(), key=lambda kv: kv[1]["used"], reverse=True)[:MAX_RECORDS]
    for _, rec in keep:
        for field in ("curve", "bookkeeping", "measured"):
            if len(rec[field]) > MAX_ENTRIES:  # the newest measurements stay
                rec[field] = dict(list(rec[field].items())[-MAX_ENTRIES:])
    while keep and len(_text(dict(keep))) > MAX_BYTES:
        keep.pop()
    return dict(keep)


def _text(records: dict) -> bytes:
    return json.dumps({"format": FORMAT, "version": VERSION, "records": records}, indent=1).encode()


def save(path: Path, key: str, record: dict) -> None:
    """Merge ``record`` into the cache under ``key``: locked (filelock, beside the file), bounded,
    atomic, never through a link. A save that cannot happen (read-only home, lock held too long) warns;
    the run goes on."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        check_cache(path)
        with FileLock(path.with_name(path.name + ".lock"), timeout=LOCK_SECONDS):
            with warnings.catch_warnings():  # the load before the choice already warned about this file
                warnings.simplefilter("ignore")
                records, _ = load(path)
            records[key] = {**record, "used": time.time()}
            write_atomic(path, _text(_bounded(records)))
    except Timeout:
        warnings.warn(f"calibration not kept: {path} stayed locked by another run", stacklevel=3)
    except (OSError, ConfigError) as e:
        warnings.warn(f"calibration not kept: {e}", stacklevel=3)


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` into ``path`` through a temporary file renamed over it (never through a link)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # replaces the name itself: a link there would be replaced, not followed
    finally:
        tmp.unlink(missing_ok=True)
