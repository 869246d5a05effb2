"""Command line: ``jacobigen generate``, ``generate-video``, ``bench``, ``throughput``, ``analyze``,
``methods``; one module per command, the options they share in :mod:`.options`."""

from . import generate, measure, methods, video  # noqa: F401  (each registers its commands on main)
from .group import main

__all__ = ["main"]
