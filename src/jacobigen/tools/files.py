"""Files a run reads and writes, checked before any work starts and written whole or not at all.

Torch-free, so that the command line can refuse a bad prompt file or an unwritable output path in
a fraction of a second, before a model is loaded and long before an image exists.
"""

from __future__ import annotations

import itertools
import os
import shutil
import stat
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout

from ..core.errors import ConfigError, OutputError
from ..core.reading import FILE_KINDS, read_bounded

MAX_LINE_BYTES = 1 << 16  # one prompt line
MAX_PROMPT_FILE = 64 << 20  # the whole prompt file (a path like /dev/zero never ends)


def read_prompts(path: str | Path) -> list[str]:
    """One prompt per line; blank lines and lines starting with '#' are skipped. Read line by line
    with a size cap; a line ends at LF, CRLF or a bare CR (old Mac files); the file must be UTF-8 (a
    leading byte-order mark is dropped)."""
    path = Path(path)
    prompts, total = [], 0
    try:
        # Latin-1 maps each byte to one character, so universal newlines split the raw bytes (UTF-8
        # never uses CR or LF inside a character) and each line is checked as UTF-8 below.
        with open(path, encoding="latin-1", newline=None) as f:
            for number in itertools.count(1):
                raw = f.readline(MAX_LINE_BYTES + 1).encode("latin-1")
                if not raw:
                    break
                total += len(raw)
                if len(raw) > MAX_LINE_BYTES:
                    raise ConfigError(f"prompts file {path}, line {number}: longer than {MAX_LINE_BYTES} bytes")
                if total > MAX_PROMPT_FILE:
                    raise ConfigError(f"prompts file {path} is larger than {MAX_PROMPT_FILE >> 20} MiB")
                text = _decode(raw, path, number)
                if text and not text.startswith("#"):
                    prompts.append(text)
    except OSError as e:
        raise ConfigError(f"cannot read prompts file {path}: {e.strerror or e}") from e
    if not prompts:
        raise ConfigError(f"prompts file {path} holds no prompts")
    return prompts


def _decode(raw: bytes, path: Path, number: int) -> str:
    try:
        return raw.decode("utf-8-sig" if number == 1 else "utf-8").strip()
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"prompts file {path}, line {number}: not UTF-8 (byte 0x{raw[e.start]:02x} at "
            f"column {e.start + 1}); save the file as UTF-8"
        ) from None


NAME_MAX = 255  # bytes in one file name on common file systems (checked against the real one)
MIN_FREE = 16 << 20  # free bytes an output folder must have before any work starts


def output_path(path: str | Path, what: str, force: bool = False) -> Path:
    """Where ``what`` is written: ``path``, or the file a symlink there points to (followed, never
    replaced). Anything but a regular file there (a folder, a device, a FIFO, a socket) is refused:
    writing replaces what is at the path. So is a read-only file (no write bit for anyone: its owner
    protected it; root could replace it regardless), unless ``force``."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target
    except OSError as e:
        raise ConfigError(f"cannot write {what} {path}: {e.strerror or e}") from e
    shown = path if target == path else f"{path} (-> {target})"
    if not stat.S_ISREG(mode):
        kind = FILE_KINDS.get(stat.S_IFMT(mode), "special file")
        raise ConfigError(f"{what} {shown} is a {kind}, not a regular file: name a file to write")
    if not mode & 0o222 and not force:
        raise ConfigError(f"{what} {shown} is read-only: pass --force to replace it, or name another file")
    return target


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def check_writable(path: str | Path, what: str, folder: bool = False, force: bool = False) -> Path:
    """Make sure ``path`` (a file, or a ``folder``) can be written, creating missing parent folders:
    a regular file (or a symlink to one) or nothing at the path, not read-only unless ``force``, file
    and temporary names the file system takes, free space, and a probe file that proves permission
    (permission bits lie to root and on some file systems). Returns where the file will be written."""
    path = Path(path)
    target = path if folder else output_path(path, what, force)
    where = target if folder else target.parent
    try:
        if folder and path.exists() and not path.is_dir():
            raise ConfigError(f"{what} {path} exists and is not a folder")
        where.mkdir(parents=True, exist_ok=True)
        if not folder:
            limit = _name_max(where)
            longest = max(len(target.name.encode()), len(_temporary(target).name.encode()))
            if longest > limit:
                raise ConfigError(
                    f"{what} {path}: the file name is {len(target.name.encode())} bytes, and with the temporary "
                    f"name written first it needs {longest}; this file system takes {limit}: shorten it"
                )
        fd, probe = tempfile.mkstemp(dir=where, prefix=".jacobigen-probe-")
        os.close(fd)
        os.unlink(probe)
        free = shutil.disk_usage(where).free
    except OSError as e:
        raise ConfigError(f"cannot write {what} {path}: {e.strerror or e}") from e
    if free < MIN_FREE:
        raise OutputError(
            f"cannot write {what} {path}: {free >> 20} MiB free in {where}, at least {MIN_FREE >> 20} MiB needed"
        )
    return target


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return NAME_MAX


def distinct(outputs: dict[str, str | Path | None], inputs: dict[str, str | Path | None] | None = None) -> None:
    """Refuse two outputs of one run that land in the same file (``--out x.png --stats x.png``), and
    an output that is one of the run's inputs (``--prompts p.txt --out p.txt``)."""
    read = {os.path.realpath(p): what for what, p in (inputs or {}).items() if p is not None}
    seen: dict[str, str] = {}
    for what, path in outputs.items():
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in read:
            raise ConfigError(f"{what} {path} is the run's {read[key]}: writing it would destroy the input")
        if key in seen:
            raise ConfigError(f"{seen[key]} and {what} both write {path}: give each its own file")
        seen[key] = what


def atomic_write(path: str | Path, data: bytes, what: str = "output") -> None:
    """Write to a temporary name beside the file (a symlink's target), then rename: a killed job
    leaves the old file or the new one, never a truncated one. A write that fails (a full disk)
    leaves nothing and says so."""
    path = output_path(path, what, force=True)  # a read-only target was refused or forced before any work
    tmp = _temporary(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():  # the replaced file's permissions stay
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"cannot write {what} {path}: {e.strerror or e}") from e
    finally:
        tmp.unlink(missing_ok=True)


class FolderLock:
    """One job run per output folder: a second run on the same folder exits at once with a clear
    message instead of making every image twice. A lock on ``.jacobigen.lock`` (filelock), released
    when the run ends (or dies); the file names its holder's pid for that message."""

    def __init__(self, folder: Path):
        self.path = folder / ".jacobigen.lock"
        self.lock = FileLock(self.path, timeout=0)
        try:
            self.lock.acquire()
        except Timeout:
            raise OutputError(
                f"another jacobigen run ({self._owner()}) is writing to {folder}: wait for it, or use another --out-dir"
            ) from None
        self.path.write_text(f"pid {os.getpid()}")

    def _owner(self) -> str:
        try:
            return read_bounded(self.path, 64, "lock").decode(errors="replace").strip() or "another process"
        except ConfigError:
            return "another process"

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()


def sweep_temporaries(folder: Path) -> None:
    """Remove temporary files that killed runs left in ``folder`` (their process is gone)."""
    for tmp in folder.glob(".*.tmp"):
        try:
            pid = int(tmp.name.rsplit(".", 2)[-2])
            os.kill(pid, 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except (ValueError, OSError):  # not ours, or a live process (maybe another user's)
            continue
