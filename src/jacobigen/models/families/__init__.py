"""Real model families behind the decoders' model interface (``--model FAMILY:PATH``).

Each module supplies an adapter (our forward over a block with explicit positions, a 4-D additive
float mask and our KV cache: the contract of :class:`jacobigen.core.contract.ImageModel`) and a Pipeline
(prompt format, CFG convention, layout, VQ decoding, the paper's sampling defaults). Its ``load(path,
device, ...)`` takes the model options it supports as keyword arguments. Transformers is imported only
when a family is loaded.
"""

from __future__ import annotations

import inspect
import re
from importlib import import_module

from ...core.errors import ConfigError

FAMILIES = {
    "chameleon": "chameleon",
    "lumina-mgpt": "chameleon",
    "lumina": "chameleon",
    "lumina2": "lumina2",
    "lumina-mgpt-2": "lumina2",
    "anole": "anole",
    "cosmos": "cosmos",
    "janus": "janus",
    "janus-pro": "janus",
    "emu3": "emu3",
    "llamagen": "llamagen",
}
OPTIONS = {"size": "image side in pixels"}


def load_family(
    family: str,
    path: str,
    device: str | None = None,
    trust_checkpoint: bool = False,
    dtype=None,
    quantize: str | None = None,
):
    """Pipeline for a checkpoint of one family; weights are never downloaded.
    ``device`` None: the GPU when there is one. ``path`` may end in ``?size=512`` (image side in
    pixels, for the families whose resolution is a choice or not stored: chameleon, lumina2, emu3,
    llamagen).
    ``trust_checkpoint`` lets pickled checkpoints that hold Python objects load (they can run code).
    ``dtype``: the model's (a torch dtype; None: bfloat16, as the checkpoints are released).
    ``quantize`` goes to the families whose streaming load quantizes each layer as it is filled."""
    from ...core.contract import default_device

    name = FAMILIES.get(family.lower())
    if name is None:
        raise ConfigError(f"unknown model family {family!r}: use one of {', '.join(sorted(FAMILIES))}")
    path, _, query = path.partition("?")
    if not path:
        raise ConfigError(f"--model {family}:PATH needs the checkpoint directory after the colon")
    from ...core.quantize import quiet_torchao

    with quiet_torchao():  # transformers imports torchao (when installed) as it loads a model
        try:
            import transformers  # noqa: F401
        except ImportError:
            raise ConfigError('real model families need transformers: pip install -e ".[families]"') from None
        load = import_module(f".{name}", __name__).load
        options = model_options(family, query, inspect.signature(load).parameters)
        if "trust_checkpoint" in inspect.signature(load).parameters:  # families that unpickle anything
            options["trust_checkpoint"] = trust_checkpoint
        options["dtype"] = dtype
        if quantize and "quantize" in inspect.signature(load).parameters:
            options["quantize"] = quantize
        return load(path, device or default_device(), **options)


SIZE_STEP = {"chameleon": 32, "lumina": 32, "lumina-mgpt": 32, "emu3": 8, "llamagen": 16}  # pixels per token grid
MAX_SIDE = 8192  # pixels: far past any family's trained size, below sizes whose layouts overflow


def model_options(family: str, query: str, accepted) -> dict:
    """``size=768&...`` -> keyword options, each one the family's ``load`` takes, each given once,
    each a size the family can make (never rounded or clamped in silence)."""
    options = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        if key not in OPTIONS:
            raise ConfigError(f"unknown model option {pair!r} (supported: size=PIXELS)")
        if key not in accepted:
            raise ConfigError(f"{family} takes no {key} option: its checkpoint fixes the {OPTIONS[key]}")
        if key in options:
            raise ConfigError(f"model option {key} is given twice ({options[key]} and {value!r}): give it once")
        if not re.fullmatch(r"[0-9]{1,6}", value) or not 16 <= int(value) <= MAX_SIDE:
            raise ConfigError(f"model option {key}={value!r}: give a whole number of pixels in [16, {MAX_SIDE}]")
        step = SIZE_STEP.get(family.lower(), 1)
        if int(value) % step:
            raise ConfigError(f"{family} image sizes are multiples of {step} pixels, got {key}={value}")
        options[key] = int(value)
    return options
