"""The infrastructure every algorithm stands on (DESIGN.md, "The Algorithm contract"): the contract and the
messages (``base``), the registry (``registry``), the declared hyperparameter constraints (``hyper``), the
local and server optimizers (``optim``), and helpers shared by several algorithms (``qp``, ``herding``,
``compressed_update``). Nothing here is an algorithm; algorithms live one module each in ``algorithms/``."""
from . import hyper, optim  # noqa: F401
from .base import (Algorithm, CounterRng, LocalContext, Message, NoHyperparameters, ParamLayout,  # noqa: F401
                   ParamSlice, RoundInfo, Rng, TorchRng, as_rng, diagnose, make_hyper, register, splitmix64,
                   stack_trees, tree_map, unstack_tree, with_server_momentum)
