"""jacobigen: fast, exact Jacobi decoding for autoregressive image generators."""

from .threads import passive_wait as _passive_wait

_passive_wait()   # before torch loads OpenMP: idle threads sleep instead of spinning (unless set)

from .api import Generation, generate
from .errors import ConfigError, JacobigenError, WeightsError
from .layout import ImageLayout
from .methods import METHODS, get_method
from .model import Transformer, TransformerConfig, load_transformer, save_transformer
from .sampling import SamplingConfig

__all__ = [
    "ConfigError", "Generation", "ImageLayout", "JacobigenError", "METHODS", "SamplingConfig",
    "Transformer", "TransformerConfig", "WeightsError", "generate", "get_method", "load_transformer",
    "save_transformer",
]
__version__ = "0.1.0"
