"""FL algorithms, one module each, written to the contract in ``algorithms.core.base``; compression in
``algorithms.compress``."""
from .core.base import Algorithm, RoundInfo  # noqa: F401
from .core.layout import ParamLayout  # noqa: F401
from .core.message import Message  # noqa: F401
from .core.registry import get_class, make, names, register  # noqa: F401
