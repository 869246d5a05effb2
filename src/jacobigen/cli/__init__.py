"""Command line: ``jacobigen generate``, ``generate-video``, ``bench``, ``throughput``, ``analyze``,
``methods``, ``plan`` and ``serve``; one module per command, the options they share in :mod:`.options`."""

from ..serve.command import serve
from . import generate, measure, methods, plan, video  # noqa: F401  (each registers its commands on main)
from .group import main

main.add_command(serve)

__all__ = ["main"]
