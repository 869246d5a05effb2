"""``jacobigen serve``: the click command. Importing it is cheap: FastAPI, uvicorn and Ray load
inside the command, and a missing ``serve`` extra is a one-line error (exit 2), not a traceback."""

from __future__ import annotations

import importlib
import ipaddress
import math
import sys

import click

from ..tools.dtypes import DTYPE_OPTION
from ..tools.threads import check_threads

DEFAULT_PORT = 8000


def loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _finite(ctx, param, value: float) -> float:
    """click's FloatRange lets nan (and inf) through: a deadline that never passes."""
    if not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number of seconds", ctx, param)
    return value


def _key(ctx, param, value: str | None) -> str | None:
    """An API key a client can send: printable ASCII, no blank at its ends (HTTP strips them)."""
    if value is not None and not (value and value.isascii() and value.isprintable() and value == value.strip()):
        raise click.BadParameter(
            "the key must be printable ASCII without blanks at its ends (an empty key lets no request in)", ctx, param
        )
    return value


def _need(modules: list[str], install: str) -> None:
    """Exit 2 with the pip line to run when one of ``modules`` is missing."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            click.echo(f"error: jacobigen serve needs {name}: pip install {install}", err=True)
            sys.exit(2)


@click.command("serve")
@click.option("--model", "model_spec", default="default", show_default=True, help="Model to serve (as for generate).")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind; another than loopback needs --api-key."
)
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535))
@click.option("--max-batch", default=8, show_default=True, type=click.IntRange(1, 256), help="Images decoded together.")
@click.option(
    "--max-queue", default=64, show_default=True, type=click.IntRange(1), help="Images waiting; more get 429."
)
@click.option(
    "--max-step-tokens",
    "step_tokens",
    default=1024,
    show_default=True,
    type=click.IntRange(64),
    help="Model-row tokens one step may evaluate (rows x block): a wider window is refused, a wide batch "
    "holds fewer images, so that a step, which a cancelled request waits out, stays short.",
)
@click.option(
    "--timeout",
    default=120.0,
    show_default=True,
    type=click.FloatRange(min=1),
    callback=_finite,
    help="Seconds per request.",
)
@click.option(
    "--api-key", default=None, envvar="JACOBIGEN_API_KEY", callback=_key, help="Require 'Authorization: Bearer KEY'."
)
@click.option(
    "--calibrate/--no-calibrate",
    default=True,
    show_default=True,
    help="Keep the window policy's rungs that pay on this machine, from the calibration `generate --method auto` "
    "keeps (measured once per model and machine, then cached).",
)
@click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available).")
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    callback=check_threads,
    help="Torch CPU threads, as for generate (default: 1 for a model under 50M parameters on the CPU).",
)
@click.option(
    "--quantize",
    type=click.Choice(["int8", "int4"]),
    default=None,
    help="Quantize the model's linear weights, as for generate (torchao; int4 on CUDA only). The images "
    "then follow the quantized model's distribution.",
)
@DTYPE_OPTION
@click.option(
    "--deterministic",
    is_flag=True,
    help="Each image bit-identical to `jacobigen generate --deterministic`'s, whatever it shares a batch with "
    "(row-invariant kernels; PJD presets refused). Without it the distribution is the same.",
)
@click.option("--ray", "use_ray", is_flag=True, help="Deploy with Ray Serve on a local cluster.")
@click.option("--replicas", default=None, type=click.IntRange(1, 64), help="Ray Serve replicas (with --ray).")
def serve(
    model_spec,
    host,
    port,
    max_batch,
    max_queue,
    step_tokens,
    timeout,
    api_key,
    calibrate,
    device,
    threads,
    quantize,
    dtype,
    deterministic,
    use_ray,
    replicas,
):
    """Serve images over HTTP: an OpenAI-style POST /v1/images/generations with continuous batching,
    progress as server-sent events, /metrics, and a page at / (docs/serving.md)."""
    if not loopback(host) and not api_key:
        raise click.UsageError(f"--host {host} is reachable from other machines: give --api-key (or bind 127.0.0.1)")
    if replicas is not None and not use_ray:
        raise click.UsageError("--replicas needs --ray")
    _need(["fastapi", "uvicorn", "prometheus_client"], "'jacobigen[serve]'")
    if calibrate:
        from ..decode.calibration import cache_file, check_cache

        check_cache(cache_file())  # a folder or a FIFO there: refused before the model loads, as generate does
    if quantize:
        from ..core.quantize import check_mode
        from ..models.load import resolve_device

        check_mode(quantize, resolve_device(device))  # int4 off CUDA, or no torchao: before any weight loads
    from .app import Settings

    settings = Settings(
        max_batch=max_batch,
        max_queue=max_queue,
        step_tokens=step_tokens,
        timeout=timeout,
        api_key=api_key,
        calibrate=calibrate,
        deterministic=deterministic,
        device=device,
        threads=threads,
        quantize=quantize,
        dtype=dtype,
    )
    if use_ray:
        _need(["ray.serve"], "'ray[serve]'")
        from .replicas import deploy

        deploy(model_spec, settings, host, port, replicas or 1)
        return
    from .server import run_server

    run_server(model_spec, settings, host, port)
