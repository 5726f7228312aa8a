"""The infrastructure every algorithm stands on (the Algorithm contract: ``base``); nothing here is an
algorithm (algorithms live one module each in ``algorithms/``, compression in ``algorithms/compress/``).

* ``base``: the contract (``Algorithm``, ``LocalContext``, ``RoundInfo``, ``diagnose``);
* ``message``: ``Message`` (bits counted from the payload) and the pytree helpers;
* ``layout``: ``ParamLayout``, where each tensor lives in the flat parameter vector;
* ``rng``: the counter-based generator that makes both executors draw the same numbers;
* ``registry``: ``register``, ``configure`` / ``with_server_momentum`` (variants as configurations), lookups;
* ``hyper``: hyperparameters that declare their constraints; ``optim``: local and server optimizers;
* helpers shared by several algorithms: ``qp`` (GradMA's projections), ``herding`` (BHerd's selection).

``core`` imports nothing else of the project; ``compress`` builds on it, the algorithms on both.

The names below are the ones an algorithm module needs: ``from .core import Algorithm, Message, register``.
"""
from . import hyper, optim  # noqa: F401
from .base import Algorithm, LocalContext, NoHyperparameters, RoundInfo, descend, diagnose  # noqa: F401
from .layout import ParamLayout, ParamSlice  # noqa: F401
from .message import Message, stack_trees, tree_map, unstack_tree  # noqa: F401
from .registry import configure, make_hyper, register, with_server_momentum  # noqa: F401
from .rng import CounterRng, Rng, TorchRng, as_rng, splitmix64  # noqa: F401
