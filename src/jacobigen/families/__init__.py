"""Real model families behind the decoders' model interface (``--model FAMILY:PATH``).

Each module supplies an adapter (our forward over a block with explicit positions, a 4-D additive
float mask and our KV cache) and a Pipeline (prompt format, CFG convention, layout, VQ decoding,
the paper's sampling defaults). Transformers is imported only when a family is loaded.
"""

from __future__ import annotations

from importlib import import_module

from ..errors import ConfigError

FAMILIES = {"chameleon": "chameleon", "lumina-mgpt": "chameleon", "lumina": "chameleon",
            "janus": "janus", "janus-pro": "janus", "emu3": "emu3", "llamagen": "llamagen"}


def load_family(family: str, path: str, device: str | None = None, **options):
    """Pipeline for a checkpoint directory of one family; weights are never downloaded.
    ``device`` None: the GPU when there is one. ``path`` may end in ``?size=512`` (image side in
    pixels, for the families whose resolution is a choice: chameleon, emu3)."""
    import torch

    path, _, query = path.partition("?")
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        if key != "size" or not value.isdigit():
            raise ConfigError(f"unknown model option {pair!r} (supported: size=PIXELS)")
        options[key] = int(value)

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = FAMILIES.get(family.lower())
    if name is None:
        raise ConfigError(f"unknown model family {family!r}: use one of {', '.join(sorted(FAMILIES))}")
    if not path:
        raise ConfigError(f"--model {family}:PATH needs the checkpoint directory after the colon")
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ConfigError('real model families need transformers: pip install -e ".[families]"') from None
    return import_module(f".{name}", __name__).load(path, device, **options)
