"""Turns algorithms into measured results: data, partitions, models, the engine, runs and reports."""


def __getattr__(name):  # lazy: importing benchmark (or a light module such as benchmark.lifeline) stays cheap
    if name in ("Experiment", "RunResult"):
        from . import experiment

        return getattr(experiment, name)
    if name == "run":
        from .plan import run

        return run
    if name == "FederatedDataset":
        from .federated_dataset import FederatedDataset

        return FederatedDataset
    raise AttributeError(name)
