"""Turns algorithms into measured results, in rooms by role (README, "Layout"): ``datasets`` (with
partitions), ``models``, ``sim`` (the round loop and its executors), ``runs`` (one run: spec, plan, store),
``campaign`` (suites, the runner, tuning), ``perf`` (measurement), ``reports`` (every writer), ``contract``
(the algorithm contract checks), and on top ``cli`` (the ``fedrepro`` command) and ``asv``.

``from benchmark import run, Experiment, FederatedDataset, RunResult``: the names a user needs, loaded lazily
so that importing ``benchmark`` (or a light module such as ``benchmark.campaign.lifeline``, which a spawned
worker imports first) stays cheap: 0.04 s CPU for the lifeline, where these names would import torch (2.4 s,
measured)."""


def __getattr__(name):
    if name == "Experiment":
        from benchmark.runs.experiment import Experiment

        return Experiment
    if name == "RunResult":
        from benchmark.runs.record import RunResult

        return RunResult
    if name == "run":
        from benchmark.runs.plan import run

        return run
    if name == "FederatedDataset":
        from benchmark.datasets.federated_dataset import FederatedDataset

        return FederatedDataset
    raise AttributeError(name)
