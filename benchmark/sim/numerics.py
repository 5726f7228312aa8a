"""The numerics policy for CUDA (issue 24): TF32 and deterministic algorithms, chosen explicitly, applied by
one function to every run (``benchmark.runs.plan.execute``) and to ``fedrepro validate``, and recorded in every
run record (``environment.numerics``: the settings in force when the run finished, read back from torch).

Default: TF32 off (float32 matmuls and convolutions round as float32, as on the CPU reference; TF32 keeps
10 mantissa bits, ~1e-3 relative, and torch's own default leaves it on for cuDNN convolutions only) and
deterministic algorithms off (cuDNN may pick non-deterministic kernels; ``fedrepro validate`` measures
whether the same seed repeats, and with ``deterministic=True`` whether that setting removes the
difference). On a CPU none of these flags changes a number; they are set and recorded all the same.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass

import torch

_CUBLAS = "CUBLAS_WORKSPACE_CONFIG"


@dataclass(frozen=True)
class Numerics:
    tf32: bool = False  # TF32 in CUDA matmuls and cuDNN convolutions
    deterministic: bool = False  # torch.use_deterministic_algorithms (+ cuBLAS workspace, cuDNN deterministic)


_policy = Numerics()  # the process's policy: what plan.execute applies (set by ``using``)


def policy() -> Numerics:
    return _policy


def _flags() -> tuple:
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark, os.environ.get(_CUBLAS))


def _set(tf32_mm: bool, tf32_conv: bool, det: bool, cudnn_det: bool, bench: bool, cublas: str | None) -> None:
    torch.backends.cuda.matmul.allow_tf32 = tf32_mm
    torch.backends.cudnn.allow_tf32 = tf32_conv
    if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) != (det, False):
        torch.use_deterministic_algorithms(det)  # 5-20 ms a call on a CPU (torch 2.14): only when it changes
    torch.backends.cudnn.deterministic = cudnn_det
    torch.backends.cudnn.benchmark = bench
    if cublas is None:
        os.environ.pop(_CUBLAS, None)
    else:
        os.environ[_CUBLAS] = cublas


@contextlib.contextmanager
def applied(p: Numerics | None = None):
    """Torch's numeric flags set to ``p`` (default: the process's policy) inside the block, restored after."""
    p = _policy if p is None else p
    before = _flags()
    _set(p.tf32, p.tf32, p.deterministic, p.deterministic, False,
         ":4096:8" if p.deterministic else before[5])
    try:
        yield p
    finally:
        _set(*before)


@contextlib.contextmanager
def using(p: Numerics):
    """``p`` as the process's policy inside the block (every run started inside applies it), and applied."""
    global _policy
    saved, _policy = _policy, p
    try:
        with applied(p):
            yield p
    finally:
        _policy = saved


def in_force() -> dict:
    """The settings in force now, read from torch (what a run record states)."""
    tf32_mm, tf32_conv, det, cudnn_det, bench, cublas = _flags()
    return {"tf32_matmul": tf32_mm, "tf32_cudnn": tf32_conv, "deterministic_algorithms": det,
            "cudnn_deterministic": cudnn_det, "cudnn_benchmark": bench, "cublas_workspace_config": cublas,
            "float32_matmul_precision": torch.get_float32_matmul_precision(), "policy": asdict(_policy)}
