"""Files a run reads and writes, checked before any work starts and written whole or not at all.

Torch-free, so that the command line can refuse a bad prompt file or an unwritable output path in
a fraction of a second, before a model is loaded and long before an image exists.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path

from ..core.errors import ConfigError

MAX_LINE_BYTES = 1 << 16  # one prompt line
MAX_PROMPT_FILE = 64 << 20  # the whole prompt file (a path like /dev/zero never ends)


def read_prompts(path: str | Path) -> list[str]:
    """One prompt per line; blank lines and lines starting with '#' are skipped. Read line by line
    with a size cap; the file must be UTF-8 (a leading byte-order mark is dropped)."""
    path = Path(path)
    prompts, total = [], 0
    try:
        with open(path, "rb") as f:
            for number in itertools.count(1):
                raw = f.readline(MAX_LINE_BYTES + 1)
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


def check_writable(path: str | Path, what: str, folder: bool = False) -> Path:
    """Make sure ``path`` (a file, or a ``folder``) can be written, creating missing parent folders;
    a probe file proves it (permission bits lie to root and on some file systems)."""
    path = Path(path)
    where = path if folder else path.parent
    try:
        if not folder and path.is_dir():
            raise ConfigError(f"{what} {path} is a folder, not a file")
        where.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=where, prefix=".jacobigen-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"cannot write {what} {path}: {e.strerror or e}") from e
    return path


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write to a temporary name beside ``path``, then rename: a killed job leaves the old file
    or the new one, never a truncated one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
