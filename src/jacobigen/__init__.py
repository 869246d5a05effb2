"""jacobigen: fast, exact Jacobi decoding for autoregressive image generators.

The names below load on first use, so that ``jacobigen --help`` and argument errors answer
without importing torch (seconds on a cold start).
"""

import importlib

from .tools.threads import passive_wait as _passive_wait

_passive_wait()  # before torch loads OpenMP: idle threads sleep instead of spinning (unless set)

from .core.errors import ConfigError, JacobigenError, WeightsError  # noqa: E402 - torch-free, after the wait policy

_LAZY = {
    "Generation": "decode.api",
    "generate": "decode.api",
    "ImageLayout": "core.layout",
    "METHODS": "decode.methods",
    "ModelBundle": "models.bundle",
    "load_bundle": "models.load",
    "load_pipeline": "models.load",
    "get_method": "decode.methods",
    "Transformer": "models.transformer",
    "TransformerConfig": "models.transformer",
    "load_transformer": "models.transformer",
    "save_transformer": "models.transformer",
    "SamplingConfig": "core.sampling",
    "VideoLayout": "core.layout",
}

__all__ = [
    "ConfigError",
    "Generation",
    "ImageLayout",
    "JacobigenError",
    "METHODS",
    "ModelBundle",
    "SamplingConfig",
    "Transformer",
    "TransformerConfig",
    "VideoLayout",
    "WeightsError",
    "generate",
    "get_method",
    "load_bundle",
    "load_pipeline",
    "load_transformer",
    "save_transformer",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'jacobigen' has no attribute {name!r}")
