"""Fan jobs out to Ray workers, each holding its model once; survive a worker's death.

A worker that dies is restarted by Ray (it loads its model again) and the chunk it was decoding
is retried; because every image depends only on its prompt and seed, a retried image is the same
image. The driver writes outputs as chunks return, so an interrupted run loses at most the
chunks in flight and a rerun skips what is on disk.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from ..core.errors import ClusterError, ConfigError
from .jobs import Job, Outputs, chunks, render

RETRIES = 3  # restarts of a dead worker, and retries of the chunk it held


class JobWorker:
    """A Ray actor: one pipeline, many chunks."""

    def __init__(self, model_spec: str, device: str | None, threads: int, trust_checkpoint: bool = False):
        import torch

        from ..models.load import load_bundle

        torch.set_num_threads(threads)
        self.pipe = load_bundle(model_spec, device, trust_checkpoint)

    def pid(self) -> int:
        return os.getpid()

    def render(self, jobs: list[Job], batch_size: int | None, options: dict) -> list[tuple[bytes, dict]]:
        return render(self.pipe, jobs, batch_size, **options)


CONNECT_TIMEOUT = 5.0  # seconds to reach a Ray head before giving up


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Fail fast, naming the address, when nothing listens at a ``HOST:PORT`` Ray address (Ray
    itself retries for minutes); ``auto`` and other forms are left to Ray."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ClusterError(
            f"cannot reach a Ray head at --address {address} within {timeout:.0f} s: "
            f"{e.strerror or e}; start one there with `ray start --head` or fix the address"
        ) from e


def _ray():
    try:
        import ray
    except ImportError as e:
        raise ConfigError('--ray needs Ray: pip install "jacobigen[ray]"') from e
    return ray


def run_ray(
    model_spec: str,
    jobs: list[Job],
    outputs: Outputs,
    *,
    workers: int = 2,
    address: str | None = None,
    device: str | None = None,
    batch_size: int | None = None,
    chunk: int = 16,
    on_result: Callable[[Job, dict], None] | None = None,
    on_start: Callable[[list[int]], None] | None = None,
    trust_checkpoint: bool = False,
    **options,
) -> dict:
    """Render the pending jobs on ``workers`` Ray actors; with no ``address`` a local Ray instance
    is started (and stopped). Each worker takes a new chunk when it returns one. ``on_start`` gets
    the workers' process ids. Returns run figures (workers, chunks, restarts seen)."""
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    if address:
        check_reachable(address)
    ray = _ray()
    todo = chunks(outputs.pending(jobs), chunk)
    n_chunks = len(todo)
    if not todo:
        return {"workers": 0, "chunks": 0}
    started = not ray.is_initialized()
    if started:
        cpus = None if address else max(workers, os.cpu_count() or 1)
        try:
            ray.init(
                address=address,
                num_cpus=cpus,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                **({} if address else {"object_store_memory": 256 * 2**20}),
            )
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ClusterError(f"cannot start or join Ray{f' at --address {address}' if address else ''}: {e}") from e
    try:
        actor = ray.remote(num_cpus=1, max_restarts=RETRIES, max_task_retries=RETRIES)(JobWorker)
        threads = max(1, (os.cpu_count() or 1) // workers) if not address else 1
        pool = [actor.remote(model_spec, device, threads, trust_checkpoint) for _ in range(workers)]
        pids = ray.get([a.pid.remote() for a in pool])
        if on_start:
            on_start(pids)
        running: dict = {}

        def submit(a) -> None:
            if todo:
                part = todo.pop(0)
                running[a.render.remote(part, batch_size, options)] = (a, part)

        for a in pool:
            submit(a)
        seen = set(pids)
        while running:
            (ref,), _ = ray.wait(list(running), num_returns=1)
            a, part = running.pop(ref)
            try:
                results = ray.get(ref)
            except ray.exceptions.RayError as e:
                raise ClusterError(
                    f"a worker failed {RETRIES + 1} times on {part[0].name}..: {e}; "
                    "finished images are kept, rerun to resume"
                ) from e
            for job, (png, record) in zip(part, results, strict=True):
                outputs.write(job, png, record)
                seen.add(record["worker_pid"])
                if on_result:
                    on_result(job, record)
            submit(a)
        return {"workers": workers, "chunks": n_chunks, "worker_processes": len(seen), "restarts": len(seen) - workers}
    finally:
        if started:
            ray.shutdown()
