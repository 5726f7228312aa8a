"""FL algorithms, one module each, written to the contract in ``algorithms.core.base``."""
from .core.base import Algorithm, Message, ParamLayout, RoundInfo, register  # noqa: F401
from .core.registry import get_class, make, names  # noqa: F401
