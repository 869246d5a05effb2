"""The ``--dtype`` option that ``generate``, ``generate-video``, ``bench``, ``plan`` and ``serve`` share:
torch-free, so that a bad value is refused before torch loads (:func:`jacobigen.models.load.check_dtype`
turns the name into a torch dtype)."""

from __future__ import annotations

import click

from ..models.embedded import DTYPE as EMBEDDED
from ..models.embedded import NATIVE_BF16_DTYPE as NATIVE

DTYPES = ("float32", "bfloat16", "float16")
DTYPE_OPTION = click.option(
    "--dtype",
    type=click.Choice(DTYPES),
    default=None,
    help=f"The model's dtype. Default: a family checkpoint's bfloat16 (as released); the embedded models' {NATIVE} "
    f"on a CPU with native bf16 (AVX512-BF16, AMX) and {EMBEDDED} elsewhere (docs/cli.md gives the measurement); "
    f"the random models' {EMBEDDED}. The target distribution is that dtype's model; lossless methods sample it "
    "exactly.",
)
