"""Campaigns of runs: suites (``suite``: ``suites/*.toml`` parsed and checked into cells), the resumable
runner (``runner``) and its process and Ray backends (``backends``, with the workers' ``lifeline``), runners
sharing a results folder (``cell_claims``), a folder's progress (``status``) and tuning on a validation split
(``tuning``)."""
