"""Whether the step is being recorded as a graph: traced by torch.compile, or captured as a CUDA
graph (``jacobigen.decode.capture``). A recorded step runs later without Python, so no part may
read the device (a host sync), keep a host-side cache, or branch on a tensor's value: each takes
its static path instead (the proactive tree keeps its fixed universe under a budget mask, PJD
keeps every segment slot, draws hash in torch)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_local = threading.local()


def recording() -> bool:
    return getattr(_local, "on", False) or torch.compiler.is_compiling()


@contextmanager
def recorded() -> Iterator[None]:
    """Run the enclosed step on its static path (what a graph capture of it records)."""
    before = getattr(_local, "on", False)
    _local.on = True
    try:
        yield
    finally:
        _local.on = before
