"""Parameter types and checks of the command line: finite numbers, windows (or ``auto``), ``-o``
method options, thread counts. Each refuses a bad value with one line naming the option."""

from __future__ import annotations

import click

from ..core.checks import number, parse_options, text
from ..core.errors import ConfigError

RESERVED = {
    "method",
    "window",
    "seed",
    "batch_size",
    "cfg",
    "temperature",
    "top_k",
    "top_p",
    "uncond",
    "progress",
    "timing",
}  # generate() arguments that have their own flags, not -o options


class Window(click.IntRange):
    """A window of at least 1 token, or ``auto`` (None): the fastest for this device (:mod:`jacobigen.tools.auto`)."""

    name = "integer|auto"

    def __init__(self):
        super().__init__(min=1)

    def convert(self, value, param, ctx):
        return None if value in ("auto", None) else super().convert(value, param, ctx)


class Finite(click.ParamType):
    """A finite float (click's FLOAT takes nan and inf), optionally bounded."""

    name = "number"

    def __init__(self, lo: float | None = None, hi: float | None = None, lo_open: bool = False):
        self.lo, self.hi, self.lo_open = lo, hi, lo_open

    def convert(self, value, param, ctx):
        try:
            return number(
                param.opts[0] if param else "value",
                float(value) if isinstance(value, str) else value,
                self.lo,
                self.hi,
                self.lo_open,
            )
        except ValueError as e:
            self.fail(str(e) if isinstance(e, ConfigError) else f"{value!r} is not a number", param, ctx)


def options_of(pairs: tuple[str, ...]) -> dict:
    """``-o key=value`` pairs as method options; generate's own settings have their own flags."""
    try:
        options = parse_options(pairs)
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--option") from e
    for key in options.keys() & RESERVED:
        raise click.BadParameter(f"{key} is not a method option: use --{key.replace('_', '-')}", param_hint=f"-o {key}")
    return options


def check_prompts(prompts) -> None:
    """PROMPTS as text the tokenizer can encode, before torch loads (bytes that are not UTF-8 reach
    ``sys.argv`` as lone surrogates, which fail only once the model has loaded)."""
    for i, prompt in enumerate(prompts, 1):
        try:
            text(f"prompt {i}", prompt)
        except ConfigError as e:
            raise click.BadParameter(str(e), param_hint="PROMPTS") from e
