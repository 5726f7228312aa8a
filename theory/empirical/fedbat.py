"""FedBAT (Li et al., ICML 2024): Table 1's claims on Fashion-MNIST, N = 30, Non-IID-2 (../shared/papers/fedbat.md,
Sec. 4; seed 000, Sec. 5.2 and the abstract)."""
from __future__ import annotations

import dataclasses

from .claim import Budget, Claim, Comparison, Margin, arm
from .scale import CpuScale, FullScale, Reduction, replication

PAPER = "fedbat"
TITLE = "FedBAT (Li et al., ICML 2024)"

BASELINES = ("signsgd", "stoc_signsgd", "noisy_signsgd", "ef_signsgd", "zerofl")
ARMS = {a.name: a for a in [arm("fedavg"), arm("fedbat")] + [arm(b) for b in BASELINES]}
SETTING = "fmnist_n30_niid2"
# Table 1, FMNIST N = 30 Non-IID-2: FedBAT 89.1 minus each baseline, in points
GAPS = {"signsgd": 10.2, "stoc_signsgd": 6.5, "noisy_signsgd": 1.5, "ef_signsgd": 0.5, "zerofl": 1.7}

CLAIMS = [
    Claim(
        id="fedbat.table1.beats_binarized", paper=PAPER,
        source="Table 1 (FMNIST, N = 30, Non-IID-2) and the abstract",
        quote="\"exceeds the accuracy of baselines by up to 9%\" (abstract); Table 1, FMNIST N = 30 Non-IID-2: FedBAT "
              "89.1 vs SignSGD 78.9, Stoc-SignSGD 82.6, Noisy-SignSGD 87.6, EF-SignSGD 88.6, ZeroFL 87.4",
        statement="At about 1 bit per parameter uplink, FedBAT's final test accuracy is higher than each binarized or "
                  "sparsified baseline's (SignSGD, Stoc-SignSGD, Noisy-SignSGD, EF-SignSGD, ZeroFL): the mean paired "
                  "difference exceeds 0 points for every one of them.",
        metric="final_accuracy",
        comparisons=tuple(Comparison("fedbat", b, "superior", 0.0, SETTING, paper_gap=GAPS[b] / 100,
                                     negligible=min(0.01, GAPS[b] / 200)) for b in BASELINES),
        margin=Margin(0.01, "1 point of test accuracy, the project's smallest effect that matters for accuracy claims: FedBAT's Sec. 5.2 calls a 0.2-point lead (89.1 vs 88.9) 'comparable', and the papers' seed spreads are tenths of a point to a few points, so a difference under a point is not one their tables present as an improvement; narrowed to half the paper's own gap where that is smaller "
                      "(EF-SignSGD 0.25, Noisy-SignSGD 0.75, ZeroFL 0.85 points)")),
    Claim(
        id="fedbat.table1.matches_fedavg", paper=PAPER,
        source="Table 1 (FMNIST, N = 30, Non-IID-2) and Sec. 5.2",
        quote="\"FedBAT can generally achieve comparable or even higher accuracy than FedAvg\" (Sec. 5.2); Table 1: "
              "FedBAT 89.1 vs FedAvg 88.9 (FedBAT - FedAvg between -1.4 and +1.0 over all 24 columns)",
        statement="FedBAT's final test accuracy is at most 1 point below FedAvg's (non-inferiority, margin 1 point, "
                  "the largest shortfall Table 1 shows is 1.4 points).",
        metric="final_accuracy",
        comparisons=(Comparison("fedbat", "fedavg", "noninferior", 0.01, SETTING, paper_gap=0.002),),
        margin=Margin(0.01, "the non-inferiority margin, 1 point (Table 1's FedBAT - FedAvg lies between -1.4 and "
                      "+1.0 points over its 24 columns): a shortfall within it is what the claim asserts")),
]

BUDGET = Budget(looks=(5, 10), cpu_minutes=225,
                reason="looks of 5 and 10 paired seeds per comparison (one look of 5 at a 4x scale: the "
                       "scales' max_seeds), the most the full report's 8 hours on the 2-core CPU afford (960 "
                       "CPU-min with 2 workers); 225 CPU-min covers its two scales' cost plans (88 + 132 "
                       "CPU-min: 7 arms of the CNN, then the main claim's 2 arms at 4x)")

_LR = {"lr": [1.0, 0.1, 0.01]}
_ALPHA = {"alpha": [0.1, 0.01, 0.001]}
_LR_ARMS, _ALPHA_ARMS = ("fedavg", "fedbat", "ef_signsgd", "zerofl"), ("signsgd", "noisy_signsgd", "stoc_signsgd")
_GRID_RULE = ("3 configurations per method, from the paper's grids (Sec. 5.1): the local lr over {1.0, 0.1, 0.01} for "
              "methods whose only tuned value is the lr (FedAvg, FedBAT, EF-SignSGD, ZeroFL); the server step size alpha "
              "over {0.1, 0.01, 0.001} (3 of the paper's {1.0, 0.1, 0.01, 0.001}) at lr 0.1 for SignSGD, "
              "Noisy-SignSGD (sigma 0.01) and Stoc-SignSGD")
_COMMON = dict(dataset="fmnist", dataset_args={"train_subset": 1500}, model="fedbat_cnn", model_args={"width": 0.25},
               partition="labelcnt:3", num_clients=30, clients_per_round=10, local_epochs=10, batch_size=64, lr=0.1,
               rounds=20, eval_every=5, eval_train_samples=1000)
_KEPT = ("real Fashion-MNIST, evaluated on the full test set (10,000 images)", "N = 30 clients, 10 sampled per round "
         "(1/3) without replacement", "Non-IID-2: 3 labels per client (labelcnt:3)", "10 local epochs of SGD, batch "
         "size 64, no momentum", "the 4-conv BN CNN of Table 4 (narrower, see reductions)", "FedBAT rho = 6, "
         "phi = 0.5; the baselines' tuned hyperparameters of Sec. 5.1 except those tuned here")
_WIDTH = Reduction("CNN width", "32/64/128/256 channels (390,880 parameters)", "8/16/32/64 (25,144)",
                   "÷4 channels, about ÷16 multiply-adds")
_SEEDS4 = Reduction("seeds", "5 runs", "one look of 5 paired seeds (the budget's limit at 4x)", "same")
_SEEDS = Reduction("seeds", "5 runs", "paired seeds in looks, up to 10", "more")


def _grids(arms):
    return {a: (_LR if a in _LR_ARMS else _ALPHA) for a in arms}


CPU = CpuScale(
    name="cpu",
    why="Table 1's FMNIST N = 30 Non-IID-2 federation (30 clients, 10 per round, 3 labels each, 10 local epochs of "
        "batch 64, the paper's FedBAT rho and phi) with the CNN of Table 4 at a quarter of its width and 50 images "
        "per client, the most a CPU affords for seven methods and up to 10 paired seeds each: the full-width CNN "
        "costs 16x per image and the paper's 2,000 images per client 40x per round.",
    settings={SETTING: dict(_COMMON)},
    kept=_KEPT,
    reductions=(
        Reduction("training data", "60,000 images (2,000 per client)", "1,500 (50 per client; fixed stratified "
                  "subset)", "÷40: one batch of 50 per local epoch, 10 local steps per round instead of ~310"),
        _WIDTH, Reduction("rounds", "100", "20", "÷5"), _SEEDS),
    grids=_grids(ARMS), grid_rule=_GRID_RULE, validation=2000, final_seeds=(0, 1, 2, 3, 4), executor="sequential",
    cost={**{a: 0.95 for a in ARMS}, "fedbat": 1.1, "fedavg": 0.9},
    cost_note="CPU time per run at one torch thread: 20-round runs of fedbat and fedavg measured with an evaluation "
              "every round (84 and 72 s, load 10), less the 16 evaluations (1.2 s each) this scale skips; the "
              "binarized baselines as fedavg",
    max_seeds=10)

# The main claim (the abstract's "exceeds the accuracy of baselines") with 4x the data per client: 200 images, 4
# local steps per epoch (40 per round), towards the paper's 2,000 images and ~310 steps.
CPU4X = dataclasses.replace(
    CPU, name="cpu4x", only=("fedbat.table1.beats_binarized",),
    why="The main claim (FedBAT beats every binarized baseline, the abstract's \"up to 9%\") again with 4x the data "
        "per client (200 images: 4 local steps per epoch, 40 per round, towards the paper's 2,000 images and ~310 "
        "steps): whether the effect grows or shrinks as local training gets longer.",
    settings={SETTING: dict(_COMMON, dataset_args={"train_subset": 6000})},
    reductions=(
        Reduction("training data", "60,000 images (2,000 per client)", "6,000 (200 per client; fixed stratified "
                  "subset)", "÷10: 40 local steps per round instead of ~310 (4x the cpu scale)"),
        _WIDTH, Reduction("rounds", "100", "20", "÷5"), _SEEDS4),
    grids=_grids(("fedbat",) + BASELINES),
    cost={**{a: 2.7 for a in BASELINES}, "fedbat": 3.05},
    cost_note="CPU time per run at one torch thread: 10-round runs of fedbat and fedavg at 200 images per client "
              "(8.9 and 7.5 s per round besides evaluation, load 10) and 2-round probes of signsgd, for 20 rounds "
              "evaluated every 5th",
    max_seeds=5)

SCALES = (CPU, CPU4X)

# Declared on 2026-11-26, after claims 0.3.0 and before any of its runs (scale.REPLICATION): the main claim again at
# the cpu scale on fresh seeds, where 0.3.0's 10 seeds left it INCONCLUSIVE (closest: SUPPORTED, about 39 seeds).
# Not repeated: matches_fedavg (about 453 seeds at its spread of 2.8 points) and the cpu4x scale (3.6x a cpu run).
REPLICATIONS = (replication(
    CPU, [c for c in CLAIMS if c.id == "fedbat.table1.beats_binarized"], cpu_minutes=260,
    why="the main claim (FedBAT beats each binarized baseline) on fresh seeds 100-139 in the calibrated looks 5, "
        "10, 20, 40: 6 arms, 18 tuning runs and up to 240 final runs at about 0.9 CPU-min each (0.3.0's records: "
        "53 s per run; the cost plan, at the older measured costs, says 252), within 260 CPU-min"),)

FULL = FullScale(suite="fedbat_table1",
                 settings={SETTING: {"dataset": "fmnist", "num_clients": 30, "partition": "labelcnt:3"}})
