"""The simulation (DESIGN.md, "The simulation core"): the one round loop (``engine``: sampling, broadcast,
local updates, aggregation, evaluation, bits; observers), the executors that run the clients' local updates
(``executors``: the sequential reference and the vectorized one, ``torch.func.vmap``), the model as a function
of one flat parameter vector (``functional``, with the client-folding layers of ``vmap_layers``) and the CUDA
numerics policy (``numerics``)."""

#: the executors (``executors.get`` builds them), named here so that the spec (``benchmark.runs.experiment``)
#: checks an executor's name without importing the executors
EXECUTORS = ("sequential", "vectorized")
