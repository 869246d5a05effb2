"""Optional dependencies, imported on first use, each failing with the extra that installs it."""

from __future__ import annotations

import warnings

from ..core.errors import ConfigError

PLOTS = 'figures need matplotlib: pip install "jacobigen[plots]"'


def plots():
    """The figure module (:mod:`jacobigen.tools.plots`); a ConfigError naming the extra without matplotlib."""
    try:
        from . import plots as module
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "matplotlib":
            raise ConfigError(PLOTS) from None
        raise
    return module


def plots_or_warn():
    """The figure module, or None with a warning: for reports whose tables stand without figures."""
    try:
        return plots()
    except ConfigError:
        warnings.warn(f"no figures written: {PLOTS}", stacklevel=3)
        return None
