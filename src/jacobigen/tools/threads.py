"""How many CPU threads torch uses, chosen on purpose, and the machine facts a timing depends on.

A small model's single-token forward is a few hundred short OpenMP regions. Between regions an
idle OpenMP thread spins (libgomp's default), so with two threads on two cores, when the other core
is busy (a training job, a test suite) every region waits a scheduler time slice for its second
thread: on this repository's 2-core machine the embedded model's single-token forward went from
8 ms to 400 ms. One thread never waits; a large model has enough work per region to gain from more.

``OMP_WAIT_POLICY=PASSIVE`` (sleep instead of spin) also removes the stall, but libgomp reads it
once, when ``import torch`` loads it: :func:`passive_wait` sets it (unless the user chose a
policy) only if torch is not loaded yet; ``jacobigen/__init__`` calls it first thing, so it holds
for the CLI and for scripts that import jacobigen before torch. Outputs record its value.
This module imports torch lazily so that it can run before torch does.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import click

from ..core.cpu import native_bf16

SMALL_MODEL = 50_000_000  # parameters below which a CPU forward runs on one thread by default
_DEFAULT_THREADS: int | None = None


def passive_wait() -> bool:
    """Ask OpenMP to sleep rather than spin while idle, unless the user chose a policy; True when
    it can still take effect (torch, and with it libgomp, not loaded yet)."""
    if "torch" in sys.modules:
        return False
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return True


def default_threads() -> int:
    """Torch's own thread count, as it was before this module first changed it."""
    global _DEFAULT_THREADS
    if _DEFAULT_THREADS is None:
        import torch

        _DEFAULT_THREADS = torch.get_num_threads()
    return _DEFAULT_THREADS


def choose_threads(model, threads: int | None = None) -> int:
    """Set and return torch's intra-op thread count: ``threads`` when given, else 1 for a small model
    on the CPU (see the module docstring), else torch's default."""
    import torch

    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    params = list(model.parameters())
    default = default_threads()
    if threads is None:
        small = sum(p.numel() for p in params) < SMALL_MODEL
        threads = 1 if small and params[0].device.type == "cpu" else default
    torch.set_num_threads(threads)
    return threads


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> dict:
    """The commit of the git checkout this package runs from (``git_commit``) and whether tracked
    files differ from it (``git_dirty``); both None outside a checkout (an installed wheel) or
    without git."""
    here = Path(__file__).resolve().parents[1]  # the jacobigen package (this file is jacobigen/tools/)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(here), *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() / "src" / "jacobigen" == here:
            return {
                "git_commit": git("rev-parse", "HEAD"),
                "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
            }
    except (OSError, subprocess.SubprocessError):
        pass
    return {"git_commit": None, "git_dirty": None}


def environment(model, model_spec: str | None = None) -> dict:
    """What a run on this machine depends on and where it came from, for every benchmark's JSON:
    threads, OpenMP wait policy, torch, device, CPU, the load average now (``loadavg_before``; the
    caller adds ``loadavg_after``), the git commit of this checkout, given the ``--model``
    spec, the weights (:func:`jacobigen.models.weights_provenance`: sha256 of each shipped file),
    their quantization (``--quantize``) and dtype (``--dtype``)."""
    import torch

    from ..core.contract import model_device, model_dtype
    from ..core.quantize import quantized_as

    weights = None
    if model_spec is not None:
        from ..models.load import weights_provenance

        weights = weights_provenance(model_spec)
    return {
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
        "torch": torch.__version__,
        "device": str(model_device(model)),
        "cpu": cpu_model(),
        "native_bf16": native_bf16(),  # what the embedded models' default dtype follows on a CPU
        "loadavg_before": loadavg(),
        **git_commit(),
        "model_spec": model_spec,
        "weights": weights,
        "quantize": quantized_as(model),  # int8 / int4 weights (--quantize), None: the model's dtype
        "dtype": model_dtype(model),  # the model's (--dtype): whose distribution the run sampled
    }


def loadavg() -> list[float] | None:
    """1, 5 and 15-minute load averages (None where the OS has none): how busy the machine was."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def environment_line(meta: dict) -> str:
    """One markdown line for a report header from :func:`environment` plus ``loadavg_before/after``."""

    def load(key):
        return "n/a" if meta.get(key) is None else f"{meta[key][0]:.2f}"

    return (
        f"{meta['threads']} thread(s), OMP_WAIT_POLICY {meta['omp_wait_policy']}, torch {meta['torch']}, "
        f"{meta['device']} ({meta['cpu']}), 1-min load average {load('loadavg_before')} before, "
        f"{load('loadavg_after')} after\n"
    )


MAX_THREADS_PER_CORE = 4  # --threads above this many per core is refused


def check_threads(ctx, param, value):
    """The ``--threads`` callback of ``generate`` and ``serve``: more torch threads than cores only
    wait on each other, so a warning above the cores, refused far above them (--threads 1000 on 2
    cores ran 25x slower)."""
    if value is None:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if value > MAX_THREADS_PER_CORE * cores:
        raise click.BadParameter(
            f"{value} threads on {cores} core(s): at most {MAX_THREADS_PER_CORE * cores}; threads beyond "
            "the cores only wait on each other"
        )
    if value > cores:
        click.echo(f"warning: --threads {value} is more than the {cores} core(s) here: expect it slower", err=True)
    return value
