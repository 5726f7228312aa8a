"""Claims of your own (README, "Claims of your own"): what the clipped FedAvg of ``my_fedavg_variant.py`` costs
and buys, tested the way fedrepro tests the papers' claims.

    fedrepro claims --plugin examples/my_fedavg_variant.py --claims examples/my_claims.py

Every arm is tuned by the papers' rule (3 learning rates on a validation split of the training data, the mean over
3 tuning seeds, the grid extended by x3 while a choice lies at its end); then paired
seeds are added in looks of 5, 10 and 20 until each claim is SUPPORTED, CONTRADICTED or NEGLIGIBLE, with the error
rates of ``theory.empirical.tracker`` under that stopping (Holm over this file's claims). Everything below is fixed
before any run: change a margin after seeing a result and the error control no longer holds. The report goes to
``runs/claims/<version>/own/clip_example/`` (about a minute on 2 cores: each run is a logistic regression on
scikit-learn's 8x8 digits, shipped offline).

The names a claims file defines are those of a paper module (``theory/empirical/bherd.py`` is the shortest);
``theory/empirical/own.py`` lists them and checks them when the file loads.
"""
from theory.empirical import Budget, Claim, Comparison, Margin
from theory.empirical.claim import arm
from theory.empirical.scale import CpuScale

PAPER = "clip_example"
TITLE = "FedAvg with clipped updates (examples/my_fedavg_variant.py) against FedAvg"

ARMS = {a.name: a for a in [arm("fedavg"), arm("fedavg_clip", clip=0.5)]}

_MARGIN = Margin(0.01, "1 point of test accuracy: below it, a difference between two FedAvg variants on this task "
                       "is not one I would report")
CLAIMS = [
    Claim(
        id="clip_example.costs_at_most_a_point", paper=PAPER, source="my own question",
        quote="clipping each client's update to norm 0.5 should cost little accuracy",
        statement="FedAvg with client updates clipped to norm 0.5 ends at most 1 point below FedAvg "
                  "(non-inferiority, margin 1 point), with label-skewed clients (Dirichlet 0.3).",
        metric="final_accuracy",
        comparisons=(Comparison("fedavg_clip", "fedavg", "noninferior", 0.01, "dir0.3"),), margin=_MARGIN),
    Claim(
        id="clip_example.helps_skewed_clients", paper=PAPER, source="my own question",
        quote="clipping bounds the pull of an outlying client, which may help when clients' labels are skewed",
        statement="FedAvg with clipped updates ends with a higher test accuracy than FedAvg with label-skewed "
                  "clients (Dirichlet 0.3).",
        metric="final_accuracy",
        comparisons=(Comparison("fedavg_clip", "fedavg", "superior", 0.0, "dir0.3"),), margin=_MARGIN),
]

BUDGET = Budget(looks=(5, 10, 20), cpu_minutes=10,
                reason="up to 20 paired seeds per comparison; a run takes about a second, so 10 CPU minutes cover "
                       "the tuning runs and every look")

_LR = {"lr": [0.03, 0.1, 0.3]}
CPU = CpuScale(
    name="cpu",
    why="a task small enough to answer in about a minute: 10 clients with Dirichlet(0.3) label skew, 5 sampled per "
        "round, 30 rounds of one local epoch",
    settings={"dir0.3": dict(dataset="digits", model="logreg", partition="dirichlet:0.3", num_clients=10,
                             clients_per_round=5, rounds=30, local_epochs=1, batch_size=32, eval_every=5)},
    kept=(), reductions=(),
    grids={a: _LR for a in ARMS},
    grid_rule="the learning rate over {0.03, 0.1, 0.3} for both arms (the same budget for each)",
    validation=300, final_seeds=(0, 1, 2, 3, 4), max_seeds=20,
    cost={"fedavg": 0.02, "fedavg_clip": 0.02}, cost_note="measured on a 2-core CPU, about a second per run")
