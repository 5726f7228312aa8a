"""The pfl-research side of ``benchmark.perf.pfl.compare`` (issue 45): FedAvg on scikit-learn's digits with pfl's own
simulator (``pfl.aggregate.simulate.SimulatedBackend``, ``pfl.algorithm.FederatedAveraging``, its PyTorch model),
run by the Python of pfl's venv, never imported by fedrepro. The work: an MLP 64-128-10, 20 users of an IID split
of the 1,347 training digits, 10 sampled per round, 1 local epoch of batch 16, plain SGD, 50 rounds; no central
evaluation during training. Prints one JSON line: the seconds (wall and CPU) of each repeat of the whole run."""
import json
import sys
import time


def main(repeats: int, rounds: int, threads: int) -> None:
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    torch.set_num_threads(threads)
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Weighted
    from pfl.model.pytorch import PyTorchModel

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    xtr, _, ytr, _ = train_test_split(x, y.astype(np.int64), test_size=450, random_state=0, stratify=y)
    users = {u: [xtr[i::20], ytr[i::20]] for i, u in enumerate(range(20))}

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

        def forward(self, x):
            return self.net(x)

        def loss(self, x, y, eval=False):
            self.eval() if eval else self.train()
            return torch.nn.functional.cross_entropy(self(x), y.long())

        @torch.no_grad()
        def metrics(self, x, y, eval=True):
            out = self(x)
            return {"loss": Weighted(float(torch.nn.functional.cross_entropy(out, y.long(), reduction="sum")), len(y))}

    def one_run():
        torch.manual_seed(0)
        np.random.seed(0)
        data = FederatedDataset.from_slices(users, get_user_sampler("random", list(users)))
        net = MLP()
        model = PyTorchModel(net, local_optimizer_create=torch.optim.SGD,
                             central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0))
        backend = SimulatedBackend(training_data=data, val_data=data)
        params = NNAlgorithmParams(central_num_iterations=rounds, evaluation_frequency=rounds + 1,
                                   train_cohort_size=10, val_cohort_size=0)
        FederatedAveraging().run(algorithm_params=params, backend=backend, model=model,
                                 model_train_params=NNTrainHyperParams(local_num_epochs=1, local_learning_rate=0.1,
                                                                       local_batch_size=16),
                                 model_eval_params=NNEvalHyperParams(local_batch_size=256), callbacks=[])

    one_run()  # warm-up
    out = []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        one_run()
        out.append({"wall": time.perf_counter() - t, "cpu": time.process_time() - c})
    print(json.dumps({"pfl": __import__("pfl").__version__, "torch": torch.__version__, "threads": threads,
                      "repeats": out}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
