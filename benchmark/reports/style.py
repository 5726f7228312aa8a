"""One fixed style per method in every plot of every report (matplotlib's own advice: one style per series across
panels, one legend), keyed by the method's name alone.

Every built-in algorithm has its own colour and marker in ``STYLES`` (a literal table: FedAvg, the baseline of
every suite, black; the others from a 15-colour palette, tab10 and five more, assigned so that the methods
of any shipped suite have distinct colours, and no two algorithms share colour and marker), so SCAFFOLD is the same
blue in the smoke suite, the matrix, the BHerd pages and a report of your own. A leaderboard row with arguments,
``fedavgm(beta1=0.5)``, keeps its algorithm's colour and marker with a dashed or dotted line chosen by its label;
a name the table does not know (a plugin) gets a colour and marker from a hash of its name and a dashed line.
Only where two names of one report would still look the same does the later one (legend order) take the next
free line style or marker, so a style never depends on which other methods a panel happens to show (a diverged
run, a method not run in a cell).

``method_styles(names)`` gives {method: {"color", "linestyle", "marker", "slot"}}; ``plot_kwargs`` turns a style
into ``Axes.plot`` arguments, ``legend_handles`` into legend entries. Each method's markers start at a point of
its own (its slot, modulo the spacing of the markers), so two curves that lie on top of each other still show
both markers side by side; the panels also say so in words (``benchmark.reports.plots``).
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable

BASELINE = "fedavg"
BASELINE_COLOR = "black"
#: tab10 and five more of other hues and depths (navy, mustard, teal, crimson, lime): 15 colours a reader tells
#: apart (tab20b's dark tones, tried first, put a dark red beside tab10's brown in gradma_reduced)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#1a237e", "#e6ab02", "#00796b", "#c2185b", "#7cb342")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h")
LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))
MARKS_PER_LINE = 8  # markers drawn along a line (``markevery``), however many points it has

#: every built-in algorithm: (colour index into PALETTE, marker index into MARKERS). Colours: greedy over the
#: shipped suites' method sets, the smoke suite's first, so that no suite shows one colour twice.
STYLES = {
    "bherd": (5, 0), "bherd_closest": (1, 2), "bherd_fednova": (2, 2), "bherd_random": (3, 2),
    "bherd_scaffold": (4, 2), "bifl": (1, 3), "bifl_full": (2, 3), "ef_signsgd": (1, 4), "fedacg": (1, 1),
    "fedasam": (2, 1), "fedavgm": (2, 0), "fedbat": (6, 0), "feddyn": (5, 1), "fedlesam": (3, 1), "fedmlb": (4, 1),
    "fedmlbm": (6, 1), "fedmo": (5, 2), "fedmoswa": (6, 2), "fednova": (6, 3), "fedpaq": (3, 3),
    "fedpaq_4bit": (4, 3), "fedprox": (1, 0), "fedproxm": (7, 1), "fedsam": (7, 2), "fedswa": (4, 0),
    "grab_fedavg": (7, 3), "gradma": (3, 0), "gradma_s": (8, 0), "gradma_w": (9, 0), "lb": (0, 2), "lfl": (7, 0),
    "lgm": (1, 5), "lossless": (2, 5), "ltgm": (3, 5), "mifa": (10, 0), "mifam": (11, 0), "mimelite": (12, 0),
    "mofedsam": (8, 1), "moon": (13, 0), "moonm": (14, 0), "noisy_signsgd": (2, 4), "scaffold": (0, 0),
    "signsgd": (0, 1), "stoc_signsgd": (3, 4), "zerofl": (4, 4),
}


def order(names: Iterable[str]) -> list[str]:
    """The methods in the order legends list them: FedAvg first, then by name."""
    return sorted(set(names), key=lambda m: (not is_baseline(m), m))


def is_baseline(m: str) -> bool:
    return m == BASELINE or m.startswith(BASELINE + "(")


def _hash(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def name_style(m: str) -> tuple:
    """(colour, line style index, marker index) of method ``m`` by its name alone (module docstring)."""
    base, args = (m.split("(", 1) + [""])[:2]
    if base == BASELINE:
        color, marker, line = BASELINE_COLOR, 0, 0
    elif base in STYLES:
        color, marker, line = PALETTE[STYLES[base][0]], STYLES[base][1], 0
    else:
        h = _hash(base)
        color, marker, line = PALETTE[h % len(PALETTE)], (h // len(PALETTE)) % len(MARKERS), 1
    if args:  # a row with arguments: its algorithm's colour and marker, a broken line of its own
        line = 1 + _hash(m) % (len(LINESTYLES) - 1)
    return color, line, marker


def method_styles(names: Iterable[str]) -> dict[str, dict]:
    """{method: {"color", "linestyle", "marker", "slot"}}: each method's ``name_style``; where two methods of
    ``names`` would look the same, the later one (in ``order``) takes the next free line style, then marker."""
    out, taken = {}, set()
    for i, m in enumerate(order(names)):
        color, line, marker = name_style(m)
        for k in range(len(LINESTYLES) * len(MARKERS)):
            cand = (color, (line + k) % len(LINESTYLES), (marker + k // len(LINESTYLES)) % len(MARKERS))
            if cand not in taken:
                break
        else:
            raise ValueError(f"{len(out) + 1} methods are more than one colour's {len(LINESTYLES) * len(MARKERS)} "
                             "styles: draw a selection (benchmark.reports.plots.select_methods)")
        taken.add(cand)
        out[m] = {"color": cand[0], "linestyle": LINESTYLES[cand[1]], "marker": MARKERS[cand[2]], "slot": i}
    return out


def plot_kwargs(style: dict, points: int) -> dict:
    """``Axes.plot`` keyword arguments for a line of ``points`` points drawn in ``style``: a marker every
    ``points // MARKS_PER_LINE`` points, the first at the style's slot modulo that spacing."""
    every = max(1, points // MARKS_PER_LINE)
    return {"color": style["color"], "linestyle": style["linestyle"], "marker": style["marker"],
            "markersize": 4, "linewidth": 1.4, "markevery": (style.get("slot", 0) % every, every)}


def legend_handles(styles: dict[str, dict], names: Iterable[str]) -> list:
    """Legend entries (``Line2D``) for ``names``, in ``order``, each drawn in its style."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], label=m, color=styles[m]["color"], linestyle=styles[m]["linestyle"],
                   marker=styles[m]["marker"], markersize=4, linewidth=1.4) for m in order(names)]
