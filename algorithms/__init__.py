"""FL algorithms, one module each, written to the contract in ``algorithms.base``."""
from .base import Algorithm, Message, ParamLayout, RoundInfo, get_class, make, names, register  # noqa: F401
