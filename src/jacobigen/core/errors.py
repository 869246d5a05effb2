"""Errors a user can act on: each names what was wrong, not where in torch it surfaced."""


class JacobigenError(Exception):
    """Base class for every error this package raises on purpose."""


class ConfigError(JacobigenError, ValueError):
    """A decoding or model setting is out of range or inconsistent."""


class WeightsError(JacobigenError, RuntimeError):
    """A weight file is missing, unreadable or does not match its model."""


class ClusterError(JacobigenError, ConnectionError):
    """A Ray cluster cannot be reached or joined."""


class OutputError(JacobigenError, OSError):
    """An output could not be written (a full disk, a lost mount) or its folder is in use."""


class PromptWarning(UserWarning):
    """A prompt is longer than the model reads: it is cut."""
