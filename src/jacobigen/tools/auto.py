"""``auto`` on a bundle: the model rows of a text prompt (default: the bundle's first example prompt),
handed to the one chooser in the decode layer (:mod:`jacobigen.decode.auto`). The server's window
policy and ``bench`` weigh windows this way; the API and the command line resolve the default with
:func:`jacobigen.decode.auto.resolve` on the real prompt's rows."""

from __future__ import annotations

import warnings
from pathlib import Path

from ..core.checks import SAMPLING_KEYS
from ..core.errors import ConfigError
from ..decode.auto import Choice, candidates, choose_for
from ..decode.calibration import cache_file  # noqa: F401  (the names the server imports from here)
from ..decode.steps import label  # noqa: F401
from ..models.bundle import ModelBundle


def sampling_of(bundle: ModelBundle, sampling: dict) -> dict:
    """``sampling`` over the bundle's defaults, as ``bundle.generate`` decodes (unknown keys refused)."""
    unknown = set(sampling) - set(SAMPLING_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown sampling option(s) {', '.join(sorted(unknown))}: auto takes {', '.join(SAMPLING_KEYS)}"
        )
    return {k: v for k, v in {**bundle.defaults, **sampling}.items() if v is not None and k in SAMPLING_KEYS}


def model_rows(bundle: ModelBundle, sampling: dict, prompt: str | None = None) -> tuple:
    """(model, rows) of ``prompt`` as ``bundle.generate`` hands them to :func:`jacobigen.generate`: the
    first sequence's conditional row, and its unconditional one when ``sampling`` is guided (default
    prompt: the bundle's first example prompt, or an empty one)."""
    text = prompt if prompt is not None else (bundle.example_prompts[:1] or [""])[0]
    with warnings.catch_warnings():  # the run itself warns about its prompts
        warnings.simplefilter("ignore")
        enc = bundle.encode([text])
    guided = sampling.get("cfg", 1.0) != 1.0
    return enc.model, [enc.cond[0], *(enc.uncond[:1] if enc.uncond and guided else [])]


def choose(
    bundle: ModelBundle,
    method: str = "auto",
    window: int | None = None,
    cache: Path | None = None,
    prompt: str | None = None,
    **sampling,
) -> Choice:
    """:func:`choose_for` the bundle's model on ``prompt`` (default: its first example prompt);
    ``sampling`` overrides the bundle's defaults, as in ``bundle.generate``."""
    merged = sampling_of(bundle, sampling)
    candidates(method, window)  # the arguments, before the prompt is encoded
    model, rows = model_rows(bundle, merged, prompt)
    return choose_for(model, bundle.layout, rows, merged, method, window, cache, bundle.latents)
