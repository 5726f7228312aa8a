"""The round loop, the run record and the Python API."""
import json
import math

import numpy as np
import pytest
import torch

from benchmark import Experiment, FederatedDataset, run
from benchmark.sim import executors as ex, functional
from tests.helpers import run_tiny, tiny_dataset, tiny_model


def _strip(history):
    return [{k: v for k, v in h.items() if k != "wall_time"} for h in history]


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_same_seed_gives_bit_identical_history(executor):
    a = run_tiny(executor=executor, rounds=4, seed=3)
    b = run_tiny(executor=executor, rounds=4, seed=3)
    assert _strip(a.history) == _strip(b.history)
    c = run_tiny(executor=executor, rounds=4, seed=4)
    assert _strip(a.history) != _strip(c.history)


def test_same_seed_bit_identical_on_digits():
    exp = Experiment(dataset="digits", partition="dirichlet:0.3", num_clients=8, clients_per_round=4, rounds=3, seed=1)
    assert _strip(run(exp).history) == _strip(run(exp).history)


def test_record_has_every_field_and_is_json():
    r = run_tiny(rounds=2)
    rec = json.loads(r.to_json())
    for key in ("config", "config_hash", "code_version", "environment", "partition", "history", "final", "status"):
        assert key in rec
    for h in rec["history"]:
        for key in ("round", "test_accuracy", "test_loss", "train_loss", "bits_up", "bits_down", "wall_time"):
            assert key in h
    assert rec["status"] == "ok"
    assert {"package", "git_commit", "git_dirty"} <= set(rec["code_version"])
    assert rec["final"]["test_accuracy"] == rec["history"][-1]["test_accuracy"]
    assert rec["partition"]["fingerprint"]
    assert isinstance(r.model, torch.nn.Module)


def test_bits_follow_the_messages():
    data = tiny_dataset()
    r = run_tiny(rounds=2, data=data, clients_per_round=3)
    d = sum(p.numel() for p in tiny_model(data.input_shape, 3).parameters())
    for h in r.history:
        assert h["bits_up"] == 3 * 32 * d  # 3 sampled clients, one fp32 update each
        assert h["bits_down"] == 3 * 32 * d


def test_config_hash_ignores_how_but_not_what():
    a = Experiment(executor="sequential", device="cpu")
    b = Experiment(executor="vectorized", device="auto")
    assert a.config_hash() == b.config_hash()
    assert a.config_hash() != Experiment(lr=0.05).config_hash()


def test_model_weights_returned_are_the_final_global_model():
    r = run_tiny(rounds=2)
    data = tiny_dataset()
    with torch.no_grad():
        out = r.model(data.x_test)
    acc = (out.argmax(1) == data.y_test).float().mean().item()
    assert acc == pytest.approx(r.final["test_accuracy"])


def test_client_sampling_is_without_replacement_and_uniform():
    from benchmark.sim import engine

    seen = []
    orig = ex.SequentialExecutor.run

    def spy(self, inputs):
        seen.extend([j.client_id for j in r.jobs] for r in inputs.runs)
        return orig(self, inputs)

    ex.SequentialExecutor.run = spy
    try:
        run_tiny(rounds=40, clients_per_round=2, data=tiny_dataset(num_clients=4), eval_every=40)
    finally:
        ex.SequentialExecutor.run = orig
    assert all(len(set(s)) == 2 for s in seen)
    counts = np.bincount(np.concatenate(seen), minlength=4)
    assert counts.min() > 8  # 80 draws over 4 clients: each ~20 (a uniform sampler fails this w.p. < 1e-4)
    assert engine  # imported for its side-effect-free use


def test_regression_task_uses_mse():
    r = run(Experiment(dataset=_regression_data(), num_clients=None, model="linear", rounds=30, lr=0.1, batch_size=None))
    assert r.final["test_accuracy"] is None
    assert r.final["test_loss"] < 1e-3 * r.history[0]["test_loss"] + 1e-6


def _regression_data():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(5, generator=g)
    clients = [(x, x @ w) for x in (torch.randn(30, 5, generator=g) for _ in range(3))]
    xt = torch.randn(40, 5, generator=g)
    return FederatedDataset.from_tensors(clients, (xt, xt @ w), task="regression")


def test_diverging_run_is_recorded_not_raised():
    r = run(Experiment(dataset=_regression_data(), num_clients=None, model="linear", rounds=30, lr=50.0,
                       batch_size=None, divergence_factor=None))  # only the NaN/inf rule
    assert r.status == "diverged"
    assert "non-finite" in r.message
    assert len(r.history) < 30
    json.loads(r.to_json())  # still a valid record


@pytest.mark.parametrize("bad, msg", [
    (dict(rounds=0), "rounds"), (dict(lr=-1.0), "lr"), (dict(batch_size=0), "batch_size"),
    (dict(algorithm="fedavgg"), "unknown algorithm"), (dict(executor="gpu"), "executor"),
    (dict(algorithm_args={"nope": 1}), "unknown algorithm_args"), (dict(local_epochs=0), "local_epochs"),
])
def test_invalid_experiments_are_clear_errors(bad, msg):
    with pytest.raises(ValueError, match=msg):
        Experiment(**bad).validate()


def test_unknown_dataset_and_model_are_clear_errors():
    with pytest.raises(ValueError, match="dataset"):
        run(Experiment(dataset="imagenet42", rounds=1))
    with pytest.raises(ValueError):
        run(Experiment(model="resnet9000", rounds=1))


def test_clients_per_round_larger_than_clients():
    with pytest.raises(ValueError, match="clients_per_round"):
        run_tiny(clients_per_round=9)


def test_local_steps_and_full_batch():
    r = run_tiny(rounds=2, local_steps=3, batch_size=None)
    assert r.config["local_epochs"] is None and r.config["local_steps"] == 3
    assert r.status == "ok"


def test_schedule_epoch_semantics():
    rng = np.random.default_rng(0)
    idx = np.arange(100, 121)  # 21 samples
    s = ex.client_schedule(idx, rng, local_epochs=2, local_steps=None, batch_size=8)
    assert s.steps == 6  # ceil(21/8)=3 per epoch
    real = s.idx[s.w > 0].numpy()
    assert sorted(real.tolist()) == sorted(list(range(100, 121)) * 2)
    s2 = ex.client_schedule(idx, rng, local_epochs=None, local_steps=5, batch_size=8)
    assert s2.idx.shape == (5, 8) and bool((s2.w == 1).all())


def test_weighted_batchnorm_matches_torch_batchnorm():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(3)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), bn)
    fm = functional.FunctionalModel(model, "classification")
    x = torch.randn(7, 2, 6, 6)
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    ours, stats = fm.forward_train(flat, x, torch.ones(7), buffers=fm.initial_buffers())
    ref_model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3))
    ref_model.load_state_dict(model.state_dict())
    ref = ref_model.train()(x)
    assert torch.allclose(ours, ref, atol=1e-5)
    new = fm.updated_buffers(fm.initial_buffers(), stats)
    assert torch.allclose(new["1.running_mean"], ref_model[1].running_mean, atol=1e-6)
    assert torch.allclose(new["1.running_var"], ref_model[1].running_var, atol=1e-6)
    # zero-weight rows do not change the statistics
    padded, stats2 = fm.forward_train(flat, torch.cat([x, x[:3] * 100]), torch.cat([torch.ones(7), torch.zeros(3)]))
    assert torch.allclose(padded[:7], ref, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for k in stats for a, b in zip(stats[k], stats2[k]))
    # the fused kernel (no padding) gives the same numbers
    fused, stats3 = fm.forward_train(flat, x, torch.ones(7), weighted=False)
    assert torch.allclose(fused, ours, atol=1e-6) and torch.allclose(stats3["1"][1], stats["1"][1], atol=1e-6)


def test_nothing_of_a_forward_is_stored_on_the_model():
    """The functional model holds no per-call state (torch.compile needs the step to be a function of its
    inputs): after a round of both executors its attributes, and its training copies' tensors, are the same
    objects as before; the step's tensors travel as arguments and results."""
    import algorithms
    from algorithms.core import optim
    from benchmark.sim import engine

    data = tiny_dataset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                torch.nn.Dropout(0.5), torch.nn.Linear(8, 3))
    fm = functional.FunctionalModel(model, "classification")
    state = lambda: ({k: id(v) for k, v in vars(fm).items()},  # noqa: E731
                     [(id(m), sorted(vars(m)), [id(t) for t in [*m.parameters(), *m.buffers()]])
                      for v in fm._variants.values() for m in v.module.modules()])
    before = state()
    cfg = engine.LoopConfig(1, None, 1, None, 8, 0.05, 1.0, 1, 0, None)
    for executor in ex.EXECUTORS:
        run = engine.start(algorithms.make("fedavg", fm.layout, 4), fm, data, [c.numpy() for c in data.clients],
                           cfg, optim.make("sgd"))
        [(_, out)] = list(engine.run_rounds([run], executor))
        assert out.status == "ok" and out.executor == executor
    assert state() == before


def test_dropout_masks_are_the_clients_counter_rng_draws():
    """A dropout mask is the draw ``CounterRng.uniform`` makes at that point of the client's sequence (the
    stream reserved before the forward): the functional model and the rng stay one rule."""
    from algorithms.core import CounterRng
    from benchmark.sim.functional import next_stream, stream_uniform

    a, b = CounterRng(torch.tensor(11)), CounterRng(torch.tensor(11))
    a.uniform((3,))
    b.uniform((3,))
    assert torch.equal(stream_uniform(next_stream(a), (4, 5)), b.uniform((4, 5)))
    assert torch.equal(a.uniform((2,)), b.uniform((2,)))  # both counters advanced alike
    fm = functional.FunctionalModel(torch.nn.Sequential(torch.nn.Dropout(0.5)), "classification")
    x = torch.ones(6, 8)
    out, _ = fm.forward_train(torch.zeros(0), x, rng=CounterRng(torch.tensor(5)))
    keep = (CounterRng(torch.tensor(5)).uniform((6, 8)) >= 0.5).float()
    assert torch.equal(out, x * keep / 0.5)


def test_counter_rng_is_uniform_and_independent_per_key():
    from algorithms.core import CounterRng

    u = CounterRng(1).uniform((200000,))
    assert abs(u.mean().item() - 0.5) < 0.005 and abs(u.var().item() - 1 / 12) < 0.002
    v = CounterRng(2).uniform((200000,))
    assert abs(np.corrcoef(u.numpy(), v.numpy())[0, 1]) < 0.01
    assert math.isclose(float(CounterRng(1).normal((200000,)).std()), 1.0, rel_tol=0.01)
