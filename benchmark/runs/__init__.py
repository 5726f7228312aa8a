"""One run: its hashed *what* (``experiment``: the spec, which imports no engine), how it is built and
executed (``plan``: device, executor, threads and batched groups decided once, each with its reason, and
``execute``, the one way every caller runs a job; the batching rules of ``batched``, the cost model of
``cost``), resuming inside a run (``checkpoint``), memory failures (``oom``) and the atomic, checksummed
record store (``store``)."""
