"""One spelling per field of a claims report.json (the fields are documented in ``theory/empirical/report.py``):
the names older reports used for the same field are mapped in ``read_claim``, the one reader that the report writer
(re-rendering an older report.json) and the paper pages (``theory/pages.py``) both go through.

* ``seeds``: the most paired seeds a comparison of the claim used (0.3.0 wrote it twice, also as ``seeds_used``;
  ``n_seeds`` in drafts before it);
* ``why_stopped``: why the claim's seeds stopped, a sentence (0.3.0: also ``stop_reason``; ``stopped_because``
  before it). ``stopped`` is the short code beside it ("decided", "seeds", "cpu", "no runs").
"""
from __future__ import annotations

OLD_NAMES = {"seeds_used": "seeds", "n_seeds": "seeds", "stop_reason": "why_stopped", "stopped_because": "why_stopped"}


def names_of(field: str) -> tuple:
    """Every name ``field`` has had in a report.json, this version's first."""
    return (field,) + tuple(old for old, new in OLD_NAMES.items() if new == field)


def _fits(field: str, value) -> bool:
    if field == "seeds":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, str) and bool(value)


def read_claim(c: dict) -> dict:
    """Claim ``c`` of a report.json of any version with this version's field names: an old name's value moves to
    its new name where that is missing (a value that does not fit, e.g. seeds per comparison as a dict, is dropped),
    and the old names are gone."""
    out = {k: v for k, v in c.items() if k not in OLD_NAMES}
    for old, new in OLD_NAMES.items():
        if out.get(new) is None and _fits(new, c.get(old)):
            out[new] = c[old]
    return out


def read_report(report: dict) -> dict:
    """A claims report.json with every claim (the summaries and each paper's full claims) through ``read_claim``."""
    out = dict(report)
    out["claims"] = [read_claim(c) for c in report.get("claims", [])]
    out["papers"] = [{**p, "claims": [read_claim(c) for c in p.get("claims", [])]} for p in report.get("papers", [])]
    return out
