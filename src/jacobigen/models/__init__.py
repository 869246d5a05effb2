"""Layer *models*: a model as data (:mod:`.bundle`), our transformer (:mod:`.transformer`), the emoji
token format (:mod:`.embedded`) and VQ (:mod:`.vq`), the loaders (:mod:`.load`) and the real
families (:mod:`.families`). See docs/DESIGN.md §1.

The loaders' public names are re-exported here (``from jacobigen.models import load_bundle``;
``load_pipeline`` and the other ``*_pipeline`` names are aliases of the ``*_bundle`` loaders, kept
from before). They load on first use, so that importing a light module of this package (the CLI
reads :mod:`.embedded`) does not import torch.
"""

import importlib

__all__ = [
    "EMBEDDED_PROMPTS",
    "PROMPT_BYTES",
    "VIDEO_PROMPTS",
    "WEIGHTS",
    "embedded_bundle",
    "embedded_pipeline",
    "emoji_export",
    "heldout_reference",
    "load_bundle",
    "load_pipeline",
    "own_or_shipped",
    "random_bundle",
    "random_pipeline",
    "random_video_bundle",
    "random_video_pipeline",
    "resolve_device",
    "video_bundle",
    "video_pipeline",
    "vq_pictures",
    "weights_id",
    "weights_provenance",
]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(".load", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
