"""Shared evidence helpers: how the claims make their evidence readable and JSON-safe.

* :func:`json_safe`: plain JSON-safe Python (numpy -> Python, NaN -> None, +-inf -> "inf"/"-inf");
* :func:`compact`: a ``TestResult.to_dict()`` with long vectors summarised;
* :func:`json_safe_check`: a check run with one BLAS thread whose Outcome's evidence and series are made
  JSON-safe (``theory.claims.claim(..., json_safe=True)``).
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np


def json_safe(obj: Any) -> Any:
    """Plain JSON-safe Python (allow_nan=False): numpy -> Python, NaN -> None, +-inf -> "inf"/"-inf"."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return None if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else v)
    return obj


def compact(d: dict) -> dict:
    """A TestResult.to_dict() with long vectors summarised (the report stays readable)."""
    out = dict(d)
    est = out.get("estimate")
    if isinstance(est, list) and len(est) > 8:
        vals = np.array([v for v in est if isinstance(v, (int, float))], dtype=float)
        out["estimate"] = {"length": len(est), "min": float(vals.min()), "max": float(vals.max())}
    det = dict(out.get("details") or {})
    exp = det.get("expected")
    if isinstance(exp, list) and len(exp) > 8:
        det["expected"] = f"vector of {len(exp)} values"
    out["details"] = det
    return out


def single_blas():
    """One BLAS thread for the statistics (numpy's eigvalsh on a 500 x 500 Gram matrix takes 0.02 s
    single-threaded but up to several seconds with 2 OpenBLAS threads on a loaded 2-core machine)."""
    try:
        from threadpoolctl import threadpool_limits  # installed with scikit-learn
    except ImportError:  # pragma: no cover
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def json_safe_check(fn):
    """``fn(ctx) -> Outcome`` run with :func:`single_blas`, with the Outcome's evidence and series made
    JSON-safe (:func:`json_safe`)."""

    @functools.wraps(fn)
    def check(ctx):
        with single_blas():
            out = fn(ctx)
        out.evidence = json_safe(out.evidence)
        out.series = json_safe(out.series)
        return out

    return check
