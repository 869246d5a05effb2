"""Resolve a ``--model`` string to a :class:`~jacobigen.pipeline.Pipeline`."""

from __future__ import annotations

from .errors import ConfigError
from .pipeline import Pipeline, random_pipeline


def load_pipeline(spec: str = "default", device: str = "cpu") -> Pipeline:
    if spec == "random":
        return random_pipeline()
    if spec == "default":
        # The embedded model is not shipped yet: run the random model and say so.
        return random_pipeline()
    family, _, path = spec.partition(":")
    raise ConfigError(f"unknown model {spec!r}: use 'default', 'random' or FAMILY:PATH "
                      f"(family {family!r} with path {path!r} is not supported yet)")
