"""FL algorithms, one module each, written to the contract in ``algorithms.base``."""
from .base import Algorithm, Message, ParamLayout, RoundInfo, register  # noqa: F401
from .registry import get_class, make, names  # noqa: F401
