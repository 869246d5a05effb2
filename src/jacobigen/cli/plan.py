"""``jacobigen plan``: the memory plan of a model shape (or a ``--model`` spec) without its weights."""

from __future__ import annotations

import click

from ..tools.dtypes import DTYPE_OPTION
from .group import main


@main.command("plan")
@click.option(
    "--shape",
    "names",
    multiple=True,
    help="A named shape (repeatable; 'all': every one). `jacobigen plan --list` names them.",
)
@click.option("--model", "model_spec", default=None, help="A --model spec whose shape is read from its config instead.")
@click.option("--list", "list_shapes", is_flag=True, help="List the named shapes and exit.")
@click.option("--quantize", type=click.Choice(["int8", "int4"]), default=None, help="Linear weights at int8 or int4.")
@DTYPE_OPTION
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="Whose free memory to plan against (cpu, cuda, cuda:N, mps); one this machine lacks is planned against "
    "JACOBIGEN_DEVICE_MEMORY, or with its free memory unknown.",
)
@click.option("--window", type=click.IntRange(min=1), default=32, show_default=True, help="Tokens per block.")
@click.option("--batch-size", type=click.IntRange(min=1), default=1, show_default=True, help="Sequences together.")
@click.option("--cfg/--no-cfg", default=None, help="Two model rows per sequence (default: the family's own).")
@click.option(
    "--table",
    is_flag=True,
    help="One markdown table of weights, KV cache and activations at bf16, int8 and int4 (no free memory).",
)
def plan_command(model_spec, names, list_shapes, quantize, dtype, device, window, batch_size, cfg, table):
    """Print the memory a decode needs: weights, KV cache, buffers and activations. It needs no GPU:
    a device this machine lacks is planned against ``JACOBIGEN_DEVICE_MEMORY`` (or its free memory is
    said to be unknown)."""
    from ..core.errors import ConfigError
    from ..core.quantize import check_mode
    from ..models import memory, shapes
    from ..models.load import check_dtype, default_dtype, parse_device
    from ..models.releases import RELEASES

    if list_shapes:
        for s in map(shapes.named, RELEASES):
            click.echo(f"{s.name:22} {s.parameters / 1e9:6.2f} B  {s.note}")
        return
    if model_spec and names:
        raise click.UsageError("give --shape or --model, not both")
    chosen = [shapes.named(n) for n in (RELEASES if "all" in names else names)]
    if model_spec:
        found = shapes.shape_of(model_spec)
        if found is None:
            raise ConfigError(f"the shape of {model_spec} is known only once it loads (no config to read)")
        chosen = [found]
    if not chosen:
        raise click.UsageError("give --shape NAME (or all) or --model SPEC")
    device = parse_device(device)
    check_mode(quantize, device)  # int4 off CUDA, as generate refuses it
    # the dtype the loader would use: named shapes are family checkpoints (bfloat16 as released)
    dtype = check_dtype(dtype, quantize) or default_dtype(model_spec or "family:", str(device))
    kw = dict(device=device, window=window, batch=batch_size, cfg=cfg)
    if table:
        click.echo(memory.table(chosen, **kw))
        return
    for i, shape in enumerate(chosen):
        p = memory.plan(shape, dtype=dtype, quantize=quantize, **kw)
        click.echo(("\n" if i else "") + p.text())
