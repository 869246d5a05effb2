"""``jacobigen methods``: the presets and the parts a method string joins, with their options."""

from __future__ import annotations

import click

from .group import main


@main.command()
def methods():
    """List method presets and the parts a method string joins with +, whether each is lossless,
    and their options."""
    from ..core.registry import KINDS, PARTS
    from ..decode.methods import LEFT_OUT, METHODS

    width = max(len(n) for n in [*METHODS, *PARTS])

    def line(name, lossless, description, options, indent=""):
        opts = ", ".join(f"{k}={v}" for k, v in options.items())
        kind = "lossless" if lossless else "lossy   "
        click.echo(f"{indent}{name:<{width}}  {kind}  {description}" + (f"  [{opts}]" if opts else ""))

    for m in METHODS.values():
        line(m.name, m.lossless, m.description, m.options)
    left_out = ", ".join(f"a {kind} {name}" for kind, name in LEFT_OUT.items())
    click.echo(f"\nparts, joined by + into a method string (e.g. scd-gs+pac+vp; left out: {left_out}):")
    for p in sorted(PARTS.values(), key=lambda p: KINDS.index(p.kind)):
        line(p.name, p.lossless, f"{p.kind}: {p.description}", p.options, "  ")
