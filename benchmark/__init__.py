"""Turns algorithms into measured results: data, partitions, models, the engine, runs and reports."""
from .federated_dataset import FederatedDataset  # noqa: F401


def __getattr__(name):  # lazy: importing benchmark stays cheap
    if name in ("Experiment", "run", "RunResult"):
        from . import experiment

        return getattr(experiment, name)
    raise AttributeError(name)
