"""The simulation (DESIGN.md, "The simulation core"): the one round loop (``engine``: sampling, broadcast,
local updates, aggregation, evaluation, bits; observers), the executors that run the clients' local updates
(``executors``: the sequential reference and the vectorized one, ``torch.func.vmap``), the model as a function
of one flat parameter vector (``functional``, with the client-folding layers of ``vmap_layers``) and the CUDA
numerics policy (``numerics``)."""

#: the executors (``executors.get`` builds them), named here so that the spec (``benchmark.runs.experiment``)
#: checks an executor's name without importing the executors
EXECUTORS = ("sequential", "vectorized")

#: ``Experiment.compile``'s value for the step compiled whole and replayed as a CUDA graph (``compiling``)
GRAPH = "graph"


def is_compile_mode(value) -> bool:
    """Whether ``value`` is one of ``Experiment.compile``'s: False (off), True (``torch.compile``'s default mode) or
    ``GRAPH`` (identity for the booleans: 0 and 1 are not modes)."""
    return value is False or value is True or value == GRAPH
