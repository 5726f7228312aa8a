"""One fixed style per method for every plot of a report (matplotlib's own advice: one style per series
across panels, one legend).

``method_styles(names)`` gives each method a colour, a line style and a marker, from a palette sized for
the methods shown: up to 10 methods besides FedAvg get tab10's 10 colours with solid lines, more get the
10 colours crossed with 5 line styles (50 at most), and every method a marker as well; FedAvg, the baseline
of every suite, is always black and solid. With many methods, the ones a headline figure shows take the
first 10 slots (a colour each, solid). The map depends only on the set of names and that leading group, so
every panel and every figure of a report shows a method the same way, whichever methods a panel happens
to lack (a diverged run, a method not run in that cell). ``plot_kwargs`` turns a style into ``Axes.plot``
arguments, ``legend_handles`` into legend entries that list every method drawn. Each method's markers start at
a point of its own (its slot, modulo the spacing of the markers), so two curves that lie on top of each other
still show both markers side by side; the panels also say so in words (``benchmark.reports.plots``).

Used by the leaderboard plots (``benchmark.reports.plots``); any other report that draws methods (the
claims report) takes its styles from here so that a method looks the same everywhere.
"""
from __future__ import annotations

from collections.abc import Iterable

BASELINE = "fedavg"
BASELINE_COLOR = "black"
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h")
LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))
MARKS_PER_LINE = 8  # markers drawn along a line (``markevery``), however many points it has


def _colors(n: int) -> tuple[list, tuple]:
    """``n`` colours from a palette sized for them, and the line styles to cross them with."""
    import matplotlib  # lazy: matplotlib adds 0.1 s CPU, pyplot 0.4 s, to every fedrepro start (measured)

    tab10 = list(matplotlib.colormaps["tab10"].colors)
    return tab10, ("-",) if n <= len(tab10) else LINESTYLES


def order(names: Iterable[str]) -> list[str]:
    """The methods in the order legends list them: FedAvg first, then by name."""
    return sorted(set(names), key=lambda m: (not is_baseline(m), m))


def is_baseline(m: str) -> bool:
    return m == BASELINE or m.startswith(BASELINE + "(")


def slots(names: Iterable[str], first: Iterable[str] = ()) -> list[str]:
    """Every method but FedAvg in the order styles are handed out: the ``first`` ones (the methods a headline
    figure shows), then the others, each group by name. Slot i gets colour i mod 10 and line style i div 10,
    so any 10 consecutive slots (a row of small multiples) have 10 different colours."""
    names = set(names)
    lead = sorted({m for m in first if m in names and not is_baseline(m)})
    return lead + sorted(m for m in names if m not in lead and not is_baseline(m))


def method_styles(names: Iterable[str], first: Iterable[str] = ()) -> dict[str, dict]:
    """{method: {"color", "linestyle", "marker", "slot"}}: distinct for every method of ``names``, a function of the set
    of names and of ``first`` only (see ``slots``: with at most 10 methods besides FedAvg, or for the ``first``
    10, a colour each and solid lines). Raises ValueError when more methods are asked for than the palette can
    tell apart (50 besides FedAvg)."""
    names = set(names)
    others = slots(names, first)
    colors, styles = _colors(len(others))
    if len(others) > len(colors) * len(styles):
        raise ValueError(f"{len(others)} methods are more than {len(colors) * len(styles)} distinct styles: draw "
                         "a selection (benchmark.reports.plots.select_methods) or small multiples")
    out = {m: {"color": BASELINE_COLOR, "linestyle": "-", "marker": "o", "slot": 0} for m in names if is_baseline(m)}
    for i, m in enumerate(others):
        out[m] = {"color": colors[i % len(colors)], "linestyle": styles[(i // len(colors)) % len(styles)],
                  "marker": MARKERS[i % len(MARKERS)], "slot": i + 1}
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
