"""LFL (Amiri et al., arXiv 2006.10672v2): Fig. 1(a)'s claims, non-iid MNIST-sized data, M = 40 devices all taking
part, tau = 4, (q1, q2) = (2, 2) (../shared/papers/lfl.md, Sec. 4; seed 002, Sec. 4)."""
from __future__ import annotations

import dataclasses

from .claim import Budget, Claim, Comparison, Margin, arm
from .scale import CpuScale, FullScale, Reduction, replication

PAPER = "lfl"
TITLE = "LFL (Amiri et al., arXiv 2006.10672v2)"

ARMS = {a.name: a for a in [arm("lossless"), arm("lb", q2=2), arm("lfl", q1=2, q2=2), arm("lgm", q1=2, q2=2),
                             arm("ltgm", q1=50, q2=2)]}
SETTING = "noniid_m40_full"

_FIG = "Fig. 1(a) (MNIST non-iid, M = 40, tau = 4, (q1, q2) = (2, 2)), Sec. 4"
CLAIMS = [
    Claim(
        id="lfl.fig1a.matches_lossless", paper=PAPER, source=_FIG,
        quote="\"LFL algorithm with (q1,q2)=(2,2) performs as good as the fully lossless and LB approaches\" ... "
              "\"without any visible performance degradation\" (no accuracy numbers are printed)",
        statement="At full participation, LFL's accuracy curve is at most 1 point below the fully lossless scheme's "
                  "and LB's: mean test accuracy over the evaluated rounds (the area under the curve: the paper judges "
                  "\"no visible degradation\" on curves), non-inferiority margin 1 point (ours).",
        metric="mean_accuracy",
        comparisons=(Comparison("lfl", "lossless", "noninferior", 0.01, SETTING),
                     Comparison("lfl", "lb", "noninferior", 0.01, SETTING)),
        margin=Margin(0.01, "the non-inferiority margin, 1 point of mean accuracy (ours: the paper prints no "
                      "accuracies): a shortfall within it is what 'as good as' asserts")),
    Claim(
        id="lfl.eq16.downlink_bits", paper=PAPER, source="Sec. 4 (Fig. 1(a)) and Eq. (16)",
        quote="\"despite a factor of 12.77 savings in the number of bits that need to be broadcast compared to the LB "
              "approach\" (ideal coding: 33 / (1 + log2 3) bits per entry)",
        statement="LB's downlink bits per round are at least 10.9 times LFL's: LB sends 33 bits per entry, LFL (q1 = 2) "
                  "3 bits per entry with whole-bit packing (11.0x; the paper's 12.77x assumes log2(3) = 1.585 bits per "
                  "level), less a 64-bit header and byte padding per message.",
        metric="bits_down_per_round", comparisons=(Comparison("lfl", "lb", "ratio", 10.9, SETTING),)),
    Claim(
        id="lfl.fig1a.beats_lgm_ltgm", paper=PAPER, source=_FIG,
        quote="\"The advantage of the proposed LFL algorithm over the LTGM and LGM algorithms for the non-iid scenario "
              "can be clearly seen\"",
        statement="LFL's accuracy curve is above LGM's (q1 = 2) and LTGM's (q1 = 50): a higher mean test accuracy "
                  "over the evaluated rounds.",
        metric="mean_accuracy",
        comparisons=(Comparison("lfl", "lgm", "superior", 0.0, SETTING),
                     Comparison("lfl", "ltgm", "superior", 0.0, SETTING)),
        margin=Margin(0.01, "1 point of mean accuracy over the curve, the project's smallest effect that matters for "
                      "accuracy claims (the paper prints no numbers: its 'clearly seen' advantage is read off curves)")),
]

BUDGET = Budget(looks=(5, 10), cpu_minutes=165,
                reason="looks of 5 and 10 paired seeds per comparison (one look of 5 at a 4x scale: the "
                       "scales' max_seeds), the most the full report's 8 hours on the 2-core CPU afford (960 "
                       "CPU-min with 2 workers); 165 CPU-min covers its two scales' cost plans (67 + 94 "
                       "CPU-min: 5 arms of a small CNN on 40 devices, then the main claim at 4x)")

_LR = {"lr": [0.01, 0.03, 0.1]}
_GRID_RULE = ("3 configurations per method: the SGD learning rate over {0.01, 0.03, 0.1} (the paper gives no lr or grid); "
              "quantization levels fixed at the paper's")
_COMMON = dict(dataset="fmnist", model="lfl_cnn_mnist", model_args={"width": 0.25}, partition="labelcnt:1",
               num_clients=40, local_steps=4, batch_size=50, optimizer="sgd", lr=0.05, rounds=30, eval_every=2,
               eval_train_samples=2000)
_KEPT = ("M = 40 devices, all taking part every round (the setting in which LFL's quantized downlink is used; with "
         "partial participation LFL resends the model and equals LB)",
         "non-iid: one class per device (labelcnt:1, 4 devices per class)", "tau = 4 local steps",
         "(q1, q2) = (2, 2) for LFL and LGM, q2 = 2 for LB, LTGM q1 = 50", "Table 1's MNIST CNN (narrower, see "
         "reductions)", "the full training set (60,000 images; tuning runs hold 2,000 out) and the full test set")
_COMMON_REDUCTIONS = (
    Reduction("dataset", "MNIST", "Fashion-MNIST (MNIST is not available offline)", "substitution"),
    Reduction("local minibatch", "500", "50", "÷10"),
    Reduction("optimizer", "Adam", "SGD (lfl_reduced: with one class per device, local Adam reset every round stayed "
              "at chance for every lr tried; the paper's theory uses SGD)", "substitution"),
    Reduction("CNN width", "32/64/64 channels, FC 128 (130,890 parameters)", "8/16/16, FC 32 (8,538)",
              "÷4, about ÷16 multiply-adds"))
_SEEDS4 = Reduction("seeds", "1 curve", "one look of 5 paired seeds (the budget's limit at 4x)", "more")
_SEEDS = Reduction("seeds", "1 curve", "paired seeds in looks, up to 10", "more")

CPU = CpuScale(
    name="cpu",
    why="Fig. 1(a)'s federation (M = 40 devices all taking part, one class per device, tau = 4, the paper's "
        "quantization levels) with a 4x narrower CNN and a 10x smaller minibatch; 30 rounds cost about a "
        "CPU-minute per run. The claims are about curves (the mean accuracy over the evaluated rounds) and bits; "
        "the curve is evaluated every 2nd round (15 points).",
    settings={SETTING: dict(_COMMON)},
    kept=_KEPT,
    reductions=_COMMON_REDUCTIONS + (Reduction("rounds", "not stated (about 200 hinted)", "30", "about ÷7"), _SEEDS),
    grids={a: _LR for a in ARMS}, grid_rule=_GRID_RULE, validation=2000, final_seeds=(0, 1, 2, 3, 4),
    executor="sequential",
    cost={"lfl": 1.0, "lossless": 1.05, "lb": 1.05, "lgm": 1.0, "ltgm": 1.05},
    cost_note="CPU time per run at one torch thread: 3-round runs of lfl and lossless (1.87 and 2.05 s per round "
              "with an evaluation every 3rd round, load 5-10) for 30 rounds; lb, lgm and ltgm as lossless",
    max_seeds=10)

# The main claim again with 4x the rounds (120, near the paper's hinted 200): does LFL stay within 1 point of the
# lossless schemes as training goes on, when the quantized downlink's error would show (LGM's drop is late)?
CPU4X = dataclasses.replace(
    CPU, name="cpu4x", only=("lfl.fig1a.matches_lossless",),
    why="The main claim (LFL as good as lossless FL and LB at 11x fewer downlink bits) again with 4x the rounds "
        "(120, near the paper's hinted 200): the downlink quantization error matters most late in training, so "
        "this is where a degradation would show.",
    settings={SETTING: dict(_COMMON, rounds=120, eval_every=4)},
    reductions=_COMMON_REDUCTIONS + (Reduction("rounds", "not stated (about 200 hinted)", "120",
                                               "about ÷1.7 (4x the cpu scale)"), _SEEDS4),
    grids={a: _LR for a in ("lfl", "lossless", "lb")},
    cost={"lfl": 3.8, "lossless": 4.0, "lb": 4.0}, max_seeds=5,
    cost_note="CPU time per run at one torch thread: 4x the cpu scale's rounds at its measured per-round cost, "
              "evaluations every 4th round")

SCALES = (CPU, CPU4X)

# Declared on 2026-11-26, after claims 0.3.0 and before any of its runs (scale.REPLICATION): the main claim again at
# the cpu scale on fresh seeds, where 0.3.0's 10 seeds left it INCONCLUSIVE (closest: CONTRADICTED, about 28 seeds).
# Not repeated: beats_lgm_ltgm (about 212 seeds at its spread, past any CPU budget here) and the cpu4x scale (its
# single tuning seed picked different learning rates for LFL and the lossless schemes; repeating it repeats that).
REPLICATIONS = (replication(
    CPU, [c for c in CLAIMS if c.id == "lfl.fig1a.matches_lossless"], cpu_minutes=150,
    why="the main claim (LFL as good as lossless FL and LB) on fresh seeds 100-139 in the calibrated looks 5, 10, "
        "20, 40: 3 arms, 9 tuning runs and up to 120 final runs at about 1.1 CPU-min each (0.3.0's records: 66 s "
        "per run), within 150 CPU-min"),)

FULL = FullScale(suite="lfl_mnist", settings={SETTING: {}})
