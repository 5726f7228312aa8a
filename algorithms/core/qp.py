"""The GradMA projection (GEM/OGD-style QP), solved exactly through its dual (GradMA paper, Eqs. 2-4).

Given p in R^d and constraint vectors M_1..M_k in R^d (the rows of ``M``, shape (k, d)), the primal

    (2)  min_{p~} 1/2 ||p - p~||^2    s.t.  <p~, M_j> >= h_j   for every j

with h = 0 in the paper (the public code's margin ``rho`` gives h_j = rho ||p|| ||M_j||), has the dual

    (4)  min_{z >= 0}  1/2 z^T G z + (q - h)^T z,     G = M M^T,  q = M p,     p~ = p + M^T z*.

With h = 0 this is the NNLS problem min_{z>=0} ||M^T z + p||, so p~ is the Euclidean projection of p onto
the cone K = {y : M y >= 0} (Moreau). Two exact solvers of (4) live here:

* ``project_small``: every active set of the k <= ~4 dual variables is tried at once (2^k candidates),
  each the stationary point of the dual on its support, clamped to z >= 0, and the candidate of least
  dual objective kept (``solve_dual_enum_qr``). Some optimal z has linearly independent support
  (Caratheodory), so the exact solution is always among the candidates, and every clamped candidate is
  dual feasible, so the least objective is the optimum. It works in square-root form: R, the float64
  Householder QR factor of [M^T | p] (R^T R = the Gram matrix), so the conditioning is that of M, not
  of G = M M^T; the candidates are pseudo-inverse solves (SVD) that drop only rounding-level singular
  values. It is pure batched tensor code with no data-dependent branching, hence safe under
  ``torch.func.vmap`` (GradMA's worker QP_l, k = 3). The KKT residual of the chosen point is returned, so
  a failed solve is never silent.
* ``project_large``: the Lawson-Hanson active-set method written on the Gram form (G, q), in float64,
  with a Python loop (finite termination, exact up to rounding); for the server's QP_g over the memory
  buffer (k <= m, up to N). Not vmap-safe; it runs in ``aggregate``. Its KKT residual is checked too.
  Working on G, it resolves nearly dependent rows of M only to ~eps * cond(M)^2; a segment it cannot
  resolve is solved again in square-root form (``solve_dual_nnls``), to ~eps * cond(M).
  ``project_rows`` is the same QP for a memory held as scaled float64 rows whose Gram matrix the caller
  keeps up to date (``update_gram``), GradMA's ``gram="incremental"``.

Both work in float64 on a normalised dual: the columns are scaled to unit norm and p to unit norm
(the feasible cone is invariant to positive column scaling, so p~ is unchanged; only z is rescaled
back), and zero columns are constraints that hold trivially (z_j = 0). p~ = p + M^T z is summed in
float64 and rounded once. ``segments`` solves one independent QP per parameter slice (the public code's
per-tensor variant).

Why square-root form and least objective (a GradMA-W failure on digits, gradma_reduced seed 0): the
three worker constraints can be nearly dependent, e.g. grad f(x_t) and x_tau - x_t nearly antiparallel
(cosine -0.9998, norms 3.2 and 0.32) with grad f(x_{tau-1}) almost in their plane: normalised Gram
condition number 2.4e10 to 3.7e10, multipliers ~300-800 times ||p|| / ||M_j||, ||p~|| ~ 0.005 ||p||. The
previous solver (Gram form, eigenvalues cut at 1e-10 of the largest, least KKT violation, p~ summed in
float32) truncated the full active set and kept a wrong face, which violated a constraint by 1.4e-6 to
5.4e-6 > qp_tol = 1e-6 (a spurious QPFailure), and elsewhere returned p~ up to ~4e-3 ||p|| off with a
violation below qp_tol (silently). tests/test_qp_failure.py has hand-built cases of both.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

Segments = Sequence[tuple[int, int]] | None

_CHUNK = 1 << 22  # entries of a d-vector per float64 chunk (Gram, QR, p~; bounds temporary memory)
#: entries of a d-vector per chunk of QP_l's QR (0.5.0, issue 45): the d x (k + 1) blocks fit a core's cache, and the
#: R factors of the chunks, stacked, are factored again (TSQR); 2.5 against 4.0 ms per QP_l of GradMA's MLP on a CPU
_QR_CHUNK = 1 << 15
#: the CPU's own kernel choice (LAPACK's SVD in QP_l) on; ``benchmark.perf.counting`` turns it off while it counts a
#: device's kernels (an accelerator takes the Jacobi sweeps)
CPU_KERNELS = True


def _gram(p: torch.Tensor, M: torch.Tensor, segments: Segments):
    """Per segment: G = M M^T (L, k, k), q = M p (L, k), ||p||^2 (L,), all in float64.

    The float64 copies are made chunk by chunk (static chunk bounds: vmap-safe), so the temporary memory
    is O(k * _CHUNK) whatever the model size.
    """
    segs = [(0, p.shape[-1])] if segments is None else list(segments)
    Gs, qs, ps = [], [], []
    for a, b in segs:
        G = q = pp = None
        for s in range(a, b, _CHUNK):
            e = min(b, s + _CHUNK)
            Mc = M[:, s:e].to(torch.float64)
            pc = p[s:e].to(torch.float64)
            g_, q_, p_ = Mc @ Mc.T, Mc @ pc, pc @ pc
            G, q, pp = (g_, q_, p_) if G is None else (G + g_, q + q_, pp + p_)
        Gs.append(G)
        qs.append(q)
        ps.append(pp)
    return torch.stack(Gs), torch.stack(qs), torch.stack(ps)


def _normalise(G: torch.Tensor, q: torch.Tensor, pp: torch.Tensor, rho: float):
    """Unit-norm columns and unit-norm p: (G^, q^ - h^, scale) with z = z^ * scale."""
    norms = torch.sqrt(torch.diagonal(G, dim1=-2, dim2=-1).clamp(min=0))
    pn = torch.sqrt(pp.clamp(min=0))
    nz = norms > 0
    inv = torch.where(nz, 1.0 / torch.where(nz, norms, torch.ones_like(norms)), torch.zeros_like(norms))
    pz = pn > 0
    inv_p = torch.where(pz, 1.0 / torch.where(pz, pn, torch.ones_like(pn)), torch.zeros_like(pn))
    Gh = G * inv[..., :, None] * inv[..., None, :]
    qh = q * inv * inv_p[..., None] - rho * nz.to(q.dtype)
    scale = inv * pn[..., None]  # z_j = z^_j * ||p|| / ||M_j||
    return Gh, qh, scale


def _lift(p: torch.Tensor, M: torch.Tensor, s: int, e: int) -> torch.Tensor:
    """[M; p] over entries s:e in float64, (k + 1, e - s): exact (float32 -> float64 loses nothing)."""
    return torch.cat([M[:, s:e], p[None, s:e].to(torch.float64)])


def _factor(p: torch.Tensor, M: torch.Tensor, segments: Segments):
    """Per segment, the R factor (L, k+1, k+1) of the d x (k+1) matrix [M^T | p], in float64, and the float64
    chunks it was computed from when the whole vector is one chunk (``_recover`` reuses them; else None).

    R^T R is the Gram matrix of [M^T | p] (G = M M^T, q = M p, ||p||^2), but R is computed by
    Householder QR (tall-skinny QR: the R factors of the chunks, stacked, factored again), which is
    backward stable: R carries the conditioning of M, not of G = M M^T. In chunks of ``_QR_CHUNK`` entries
    (since 0.5.0; before, ``_CHUNK`` like ``_gram``: one chunk for GradMA's MLP, and R differs at rounding).
    """
    segs = [(0, p.shape[-1])] if segments is None else list(segments)
    k1 = M.shape[0] + 1
    keep = p.shape[-1] <= _CHUNK  # the float64 copy is at most (k + 1) * _CHUNK entries: kept for _recover
    Rs, lifted = [], []
    for a, b in segs:
        blocks = []
        for s in range(a, b, _QR_CHUNK):
            e = min(b, s + _QR_CHUNK)
            X = _lift(p, M, s, e)  # (k + 1, e - s)
            if keep:
                lifted.append(X)
            blocks.append(torch.linalg.qr(X.T, mode="r").R)
        blocks.append(torch.zeros(k1, k1, dtype=torch.float64, device=p.device))  # at least k + 1 rows
        Rs.append(torch.linalg.qr(torch.cat(blocks), mode="r").R)
    return torch.stack(Rs), (lifted if keep else None)


def _normalise_factor(R: torch.Tensor, rho: float):
    """``_normalise`` in square-root form: from R of [M^T | p], the unit-column R^ (L, k+1, k) of M^T, c^ =
    R[:, k] / ||p|| (L, k+1), h^ (L, k) and scale (L, k), so that the dual is min_{z^>=0} 1/2 ||R^ z^ +
    c^||^2 - h^T z^ and z = z^ * scale."""
    norms = torch.linalg.vector_norm(R, dim=-2)  # column norms: ||M_j|| and ||p||
    nz = norms > 0
    inv = torch.where(nz, 1.0 / torch.where(nz, norms, torch.ones_like(norms)), torch.zeros_like(norms))
    Rn = R * inv[..., None, :]
    pn = norms[..., -1:]
    h = rho * nz[..., :-1].to(R.dtype)
    return Rn[..., :-1], Rn[..., -1], h, inv[..., :-1] * pn


def _recover(p: torch.Tensor, M: torch.Tensor, z: torch.Tensor, segments: Segments,
             lifted: list | None = None) -> torch.Tensor:
    """p + M^T z, with z (L, k) one row per segment, accumulated in float64 and rounded once to p's dtype.

    Near-degenerate constraints give large z and a p~ much shorter than the terms M_j z_j that cancel in
    it (||p~|| ~ 0.005 ||p|| with sum_j z_j ||M_j|| ~ 700 ||p|| in a GradMA-W run on digits): summed in
    float32 those terms leave constraint violations ~1e-5 ||p|| ||M_j||, in float64 ~1e-13. Chunked
    like ``_gram`` (static bounds, vmap-safe). ``lifted``: ``_factor``'s float64 chunks of [M; p], in the same
    order (a model of at most ``_CHUNK`` parameters): p + M^T z is then one float64 ``addmv`` on them, without
    converting M again (issue 45: 0.5 against 1.4 ms for GradMA's MLP).
    """
    segs = [(0, p.shape[-1])] if segments is None else list(segments)
    z = z.to(torch.float64)
    chunks = iter(lifted) if lifted is not None else None
    parts = []
    for i, (a, b) in enumerate(segs):
        step = _QR_CHUNK if chunks is not None else _CHUNK  # the kept chunks are _factor's
        for s in range(a, b, step):
            e = min(b, s + step)
            if chunks is not None:  # one float64 matrix-vector product over the kept chunk
                X = next(chunks)
                parts.append(torch.addmv(X[-1], X[:-1].T, z[i]).to(p.dtype))
                continue
            acc = p[s:e].to(torch.float64)
            for j in range(M.shape[0]):  # z_j * M_j in float64 without a float64 copy of M (z[i, j:j+1]
                acc = acc + z[i, j:j + 1] * M[j, s:e]  # is 1-d: a 0-d float64 would leave the product float32)
            parts.append(acc.to(p.dtype))
    return torch.cat(parts) if len(parts) != 1 else parts[0]


# --------------------------------------------------------------------------------------------------
# Small duals by enumeration of active sets (vmap-safe)

def _masks(k: int, device=None) -> torch.Tensor:
    """Every support set of k variables, (2^k, k) float64 in ``itertools.product((0, 1), repeat=k)`` order,
    made on ``device`` (no host tensor copied inside a step: nothing for a CUDA graph to miss)."""
    rows = torch.arange(2 ** k, device=device).unsqueeze(-1)
    return ((rows >> torch.arange(k - 1, -1, -1, device=device)) & 1).to(torch.float64)


def _jacobi_svd(A: torch.Tensor, sweeps: int | None = None):
    """Thin SVD (U, sigma, Vh) of a batch of small tall matrices A (..., m, k) by one-sided Jacobi
    (Hestenes, 1958; Demmel & Veselic, 1992: relative accuracy), a fixed number of cyclic sweeps
    (default k + 2: k = 3 columns reach rounding level in 4, tested, even with dependent columns).

    Pure elementwise tensor code: no LAPACK call, hence no error check read on the host (a CUDA
    ``linalg.svd`` reads its info tensor every call), vmap- and compile-safe. The columns of [A; I] are
    rotated together, so the bottom rows accumulate V. Singular values are not sorted; a zero column
    gives sigma = 0 and a zero column of U.
    """
    m, k = A.shape[-2], A.shape[-1]
    eye = torch.eye(k, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], k, k)
    B = torch.cat([A, eye], dim=-2)
    cols = [B[..., :, j] for j in range(k)]
    eps = torch.finfo(A.dtype).eps
    for _ in range(k + 2 if sweeps is None else sweeps):
        for p in range(k - 1):
            for q in range(p + 1, k):
                a, b = cols[p], cols[q]
                alpha, beta = (a[..., :m] * a[..., :m]).sum(-1), (b[..., :m] * b[..., :m]).sum(-1)
                gamma = (a[..., :m] * b[..., :m]).sum(-1)
                rot = gamma.abs() > eps * torch.sqrt(alpha * beta)  # not yet orthogonal to rounding
                zeta = (beta - alpha) / (2 * torch.where(rot, gamma, torch.ones_like(gamma)))
                t = torch.where(rot, torch.where(zeta >= 0, 1.0, -1.0), 0.0) / (zeta.abs() + torch.sqrt(1 + zeta * zeta))
                c = torch.rsqrt(1 + t * t).unsqueeze(-1)
                s = c * t.unsqueeze(-1)
                cols[p], cols[q] = c * a - s * b, s * a + c * b
    B = torch.stack(cols, -1)
    sig = torch.linalg.vector_norm(B[..., :m, :], dim=-2)
    U = B[..., :m, :] / torch.where(sig > 0, sig, torch.ones_like(sig)).unsqueeze(-2)
    return U, sig, B[..., m:, :].transpose(-1, -2)


def _svd(A: torch.Tensor):
    """Thin SVD (U, sigma, Vh) of a batch of small matrices: LAPACK's on a CPU (``torch.linalg.svd``: its error
    check is a host read that costs nothing there; 80x faster than the sweeps for GradMA's 8 candidates of 7 x 3,
    0.016 against 1.3 ms, issue 45), ``_jacobi_svd`` on an accelerator (no host read inside a step)."""
    if A.device.type == "cpu" and CPU_KERNELS:
        return torch.linalg.svd(A, full_matrices=False)
    return _jacobi_svd(A)


def kkt_residual(G: torch.Tensor, q: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """KKT residual of min 1/2 z^T G z + q^T z s.t. z >= 0 (last axis = variables).

    max over j of: negativity of z_j, negativity of r_j = (G z + q)_j, and |z_j r_j|, with z measured
    relative to 1 + max|z| (the normalised dual has unit-scale G and q).
    """
    r = (G @ z.unsqueeze(-1)).squeeze(-1) + q
    zs = 1.0 + z.abs().amax(dim=-1, keepdim=True)
    parts = torch.stack([(-z / zs).clamp(min=0), (-r).clamp(min=0), (z.clamp(min=0) / zs) * r.abs()])
    return parts.amax(dim=(0, -1))


def _choose(z: torch.Tensor, r: torch.Tensor, obj: torch.Tensor):
    """Among candidate dual points, the one with the least dual objective, and its KKT violation.

    Per candidate (..., S, ...): ``z`` (..., S, k), already clamped to z >= 0, so every candidate is dual
    feasible; ``r`` (..., S, k) the gradient of the dual there (the normalised primal constraint values
    minus h); ``obj`` (..., S) the dual objective f(z). The optimum z* is among the candidates (see the
    solvers) and f(z) >= f(z*) for every feasible z, so the least objective is optimal; moreover
    f(z) - f(z*) >= 1/2 ||p~(z) - p~*||^2 (normalised units) for feasible z, so a near-tie in objective,
    e.g. between duplicated constraints, can only pick a near-equal p~. (Choosing by the smallest KKT
    violation is fragile: with nearly dependent constraints a wrong face can violate its dropped
    constraint by less than rounding spoils the right face's residual, and its p~ is then far off.)

    The violation returned is the KKT residual of the chosen point: max over j of (-r_j)^+ (primal
    feasibility) and z_j |r_j| / (1 + max z) (complementary slackness); z >= 0 holds by construction.
    """
    zs = 1.0 + z.amax(dim=-1, keepdim=True)
    viol = torch.maximum((-r).clamp(min=0), z / zs * r.abs()).amax(dim=-1)  # (..., S)
    best = obj.argmin(dim=-1, keepdim=True)  # (..., 1)
    z_best = torch.take_along_dim(z, best.unsqueeze(-1), dim=-2).squeeze(-2)
    return z_best, torch.take_along_dim(viol, best, dim=-1).squeeze(-1)


def _rtol(k: int) -> float:
    return k * torch.finfo(torch.float64).eps  # numpy's and torch's default rank tolerance


def solve_dual_enum(G: torch.Tensor, q: torch.Tensor, rtol: float | None = None):
    """Exact solution of min_{z>=0} f(z) = 1/2 z^T G z + q^T z for batched small PSD G (..., k, k), Gram form.

    Returns (z, residual). Every support set A gives a candidate: the stationary point of f on span(A),
    G_AA z_A = -q_A (z = 0 elsewhere), solved as the padded system [[G_AA, 0], [0, I]] z = -[q_A; 0] by an
    eigendecomposition pseudo-inverse that drops only eigenvalues at rounding level (``w <= rtol * max|w|``,
    ``rtol = k * eps``), then clamped to z >= 0; ``_choose`` keeps the one of least f. Pure tensor code,
    vmap-safe. For G = M M^T, ``project_small`` uses the square-root form ``solve_dual_enum_qr`` instead,
    which does not square the condition number of M.
    """
    k = G.shape[-1]
    rtol = _rtol(k) if rtol is None else rtol
    A = _masks(k, G.device)  # (S, k)
    GA = G.unsqueeze(-3) * (A[:, :, None] * A[:, None, :]) + torch.diag_embed(1.0 - A)  # (..., S, k, k)
    qA = q.unsqueeze(-2) * A  # (..., S, k)
    w, V = torch.linalg.eigh(GA)
    keep = w > rtol * w.abs().amax(dim=-1, keepdim=True)
    inv_w = torch.where(keep, 1.0 / torch.where(keep, w, torch.ones_like(w)), torch.zeros_like(w))
    coef = (V.transpose(-1, -2) @ qA.unsqueeze(-1)).squeeze(-1) * inv_w
    z = (-(V @ coef.unsqueeze(-1)).squeeze(-1) * A).clamp(min=0)
    Gz = (G.unsqueeze(-3) @ z.unsqueeze(-1)).squeeze(-1)
    return _choose(z, Gz + q.unsqueeze(-2), (z * (0.5 * Gz + q.unsqueeze(-2))).sum(-1))


def solve_dual_enum_qr(R: torch.Tensor, c: torch.Tensor, h: torch.Tensor, rtol: float | None = None):
    """Exact solution of min_{z>=0} f(z) = 1/2 ||R z + c||^2 - h^T z for batched small R (..., m, k),
    c (..., m), h (..., k): the dual (4) in square-root form (G = R^T R, q - h = R^T c - h).

    Returns (z, residual). Every support set A gives a candidate, the stationary point of f on span(A),
    z_A = -pinv(R_A) c + pinv(R_A^T R_A) h_A (z = 0 outside A), from one SVD of the padded matrix
    [R_A; I_outside] (``_svd``: LAPACK on a CPU, Jacobi sweeps elsewhere; a column outside A is replaced by a
    unit column, which decouples with singular value 1), dropping singular values ``<= rtol * max`` (``rtol = k * eps``: rounding level, so only exactly
    dependent columns, such as duplicated or zero constraints, lose a direction); then clamped to z >= 0,
    and ``_choose`` keeps the candidate of least f. Some optimal z has linearly independent support
    (Caratheodory), and that support's stationary point is that z, so the optimum is a candidate.
    Working on R (the conditioning of M) rather than on G (its square) resolves nearly dependent
    constraints to ~eps * cond(M). Pure tensor code with no data-dependent branching, vmap-safe.
    """
    k = R.shape[-1]
    m = R.shape[-2]
    rtol = _rtol(k) if rtol is None else rtol
    A = _masks(k, R.device)  # (S, k)
    top = R.unsqueeze(-3) * A[:, None, :]  # (..., S, m, k)
    pad = torch.diag_embed(1.0 - A).expand(*top.shape[:-2], k, k)
    U, sig, Vh = _svd(torch.cat([top, pad], dim=-2))
    keep = sig > rtol * sig.amax(dim=-1, keepdim=True)
    inv = torch.where(keep, 1.0 / torch.where(keep, sig, torch.ones_like(sig)), torch.zeros_like(sig))
    Uc = (U[..., :m, :].transpose(-1, -2) @ c.unsqueeze(-2).unsqueeze(-1)).squeeze(-1)  # (..., S, k)
    Vh_h = (Vh @ (h.unsqueeze(-2) * A).unsqueeze(-1)).squeeze(-1)  # (..., S, k)
    z = ((Vh.transpose(-1, -2) @ (inv * inv * Vh_h - inv * Uc).unsqueeze(-1)).squeeze(-1) * A).clamp(min=0)
    s = (R.unsqueeze(-3) @ z.unsqueeze(-1)).squeeze(-1) + c.unsqueeze(-2)  # R z + c, (..., S, m)
    r = (R.transpose(-1, -2).unsqueeze(-3) @ s.unsqueeze(-1)).squeeze(-1) - h.unsqueeze(-2)
    return _choose(z, r, 0.5 * (s * s).sum(-1) - (h.unsqueeze(-2) * z).sum(-1))


def project_small(p: torch.Tensor, M: torch.Tensor, segments: Segments = None, rho: float = 0.0,
                  tol: float = 1e-6):
    """QP_l: project p (d,) onto {y : M y >= h} for a few rows M (k, d); vmap-safe.

    Returns (p_tilde, z, failed): z (L, k) in the original scale (L = number of segments), failed a
    0-d int32 tensor, 1 when some segment's KKT residual exceeds ``tol`` with finite inputs. With
    non-finite inputs p_tilde is NaN (the engine then reports divergence), never a silent p.
    """
    R, lifted = _factor(p, M, segments)
    Rn, c, h, scale = _normalise_factor(R, rho)
    finite = torch.isfinite(Rn).flatten(-2).all(-1) & torch.isfinite(c).all(-1)
    Rn = torch.where(finite[:, None, None], Rn, torch.zeros_like(Rn))
    c = torch.where(finite[:, None], c, torch.zeros_like(c))
    zh, viol = solve_dual_enum_qr(Rn, c, h)
    z = torch.where(finite[:, None], zh * scale, torch.zeros_like(zh))
    out = _recover(p, M, z, segments, lifted)
    out = torch.where(finite.all(), out, torch.full_like(out, float("nan")))
    failed = (finite & (viol > tol)).any().to(torch.int32)
    return out, z, failed


# --------------------------------------------------------------------------------------------------
# Larger duals: Lawson-Hanson active set on the Gram form (server side, not vmap-safe)


def solve_dual_active_set(G: torch.Tensor, q: torch.Tensor, tol: float = 1e-12, max_iter: int | None = None):
    """min_{z>=0} 1/2 z^T G z + q^T z for one PSD G (k, k) in float64 (Lawson & Hanson, 1974, NNLS).

    Returns (z, converged). Variables enter while the negative gradient w = -(G z + q) has a positive
    entry outside the passive set; each passive subproblem is an unconstrained least-squares solve,
    with a step back to feasibility when some passive variable would turn negative.
    """
    return _lawson_hanson(G.shape[0], G.dtype, lambda z: G @ z + q,
                          lambda idx: torch.linalg.lstsq(G[idx][:, idx], -q[idx].unsqueeze(-1)).solution.squeeze(-1),
                          tol, max_iter)


def solve_dual_nnls(R: torch.Tensor, c: torch.Tensor, h: torch.Tensor, tol: float = 1e-12,
                    max_iter: int | None = None):
    """``solve_dual_active_set`` in square-root form: min_{z>=0} 1/2 ||R z + c||^2 - h^T z for one R (n, k)
    (G = R^T R, q = R^T c - h), each passive subproblem solved on R's columns (an SVD pseudo-inverse that drops
    singular values at rounding level), so its accuracy follows the conditioning of R, not of R^T R: the
    solver for a dual that the Gram form cannot resolve (constraints nearly dependent to ~1e-15, as a bias
    feeding BatchNorm has: its gradients are float noise). Returns (z, converged)."""
    def passive_solve(idx):
        U, sig, Vh = torch.linalg.svd(R[:, idx], full_matrices=False)
        keep = sig > _rtol(len(idx) + 1) * sig.amax()
        inv = torch.where(keep, 1.0 / torch.where(keep, sig, torch.ones_like(sig)), torch.zeros_like(sig))
        return Vh.T @ (inv * inv * (Vh @ h[idx]) - inv * (U.T @ c))

    return _lawson_hanson(R.shape[1], R.dtype, lambda z: R.T @ (R @ z + c) - h, passive_solve, tol, max_iter)


def _lawson_hanson(k: int, dtype, grad, passive_solve, tol: float, max_iter: int | None):
    """The active-set loop of both dual solvers: ``grad(z)`` the dual's gradient, ``passive_solve(idx)`` the
    unconstrained minimiser on the passive variables ``idx``.

    After each outer iteration z is ``passive_solve`` of the passive set (or 0), a function of that set alone,
    so a passive set seen before means the loop cycles (rounding makes a variable enter that the next step
    drops, as a bias feeding BatchNorm does with float-noise rows): it stops there, unconverged, instead of
    running to ``max_iter``; a loop that converges never repeats a set, and its result is unchanged."""
    z = torch.zeros(k, dtype=dtype)
    if k == 0:
        return z, True
    passive = torch.zeros(k, dtype=torch.bool)
    seen = set()
    max_iter = 3 * k + 10 if max_iter is None else max_iter
    w = -grad(z)
    for _ in range(max_iter):
        cand = torch.where(passive, torch.full_like(w, -torch.inf), w)
        j = int(torch.argmax(cand))
        if not bool(cand[j] > tol):
            return z, True
        passive[j] = True
        for _inner in range(k + 1):
            idx = passive.nonzero().flatten()
            s = torch.zeros_like(z)
            s[idx] = passive_solve(idx)
            if bool((s[idx] > 0).all()):
                break
            bad = idx[s[idx] <= 0]
            den = z[bad] - s[bad]
            alpha = torch.min(torch.where(den > 0, z[bad] / torch.where(den > 0, den, 1.0), 0.0))
            z = z + alpha * (s - z)
            passive &= z > tol
            z = torch.where(passive, z, torch.zeros_like(z))
            if not bool(passive.any()):
                s = torch.zeros_like(z)
                break
        else:  # the inner loop did not reach a feasible passive solution: report, do not guess
            return z, False
        z = s
        key = passive.numpy().tobytes()
        if key in seen:
            return z, False
        seen.add(key)
        w = -grad(z)
    return z, False


def _solve_segments(G: torch.Tensor, q: torch.Tensor, pp: torch.Tensor, rho: float, tol: float, rows):
    """The normalised dual (4) of every segment solved on the host: (z (L, k) in the original scale, z^ (L, k)
    normalised, failed, worst KKT residual), or None for non-finite input. The Gram form first
    (``solve_dual_active_set``); a segment it leaves unsolved (KKT residual over ``tol``) is solved again in
    square-root form (``solve_dual_nnls`` on the R factor of [M^T | p], ``rows(i)`` giving the segment's
    (p, M)), whose accuracy follows cond(M) rather than cond(M)^2, accepted when its KKT residual is within
    ``tol``; a segment fails only if that fails too."""
    Gh, qh, scale = _normalise(G.cpu(), q.cpu(), pp.cpu(), rho)
    if not (torch.isfinite(Gh).all() and torch.isfinite(qh).all()):
        return None
    zs, failed, worst = [], 0, 0.0
    for i in range(len(Gh)):
        zl, ok = solve_dual_active_set(Gh[i], qh[i])
        res = float(kkt_residual(Gh[i], qh[i], zl))
        if (not ok) or res > tol:
            Rn, c, h, sc = (t[0].cpu() for t in _normalise_factor(_factor(*rows(i), None)[0], rho))
            zr, _ = solve_dual_nnls(Rn, c, h)
            res_r = float(kkt_residual(Rn.T @ Rn, Rn.T @ c - h, zr))
            if res_r <= tol:  # the KKT conditions hold: optimal, whether or not the active-set loop finished
                zl, res, ok, scale[i] = zr, res_r, True, sc
        worst = max(worst, res)
        failed += int((not ok) or res > tol)
        zs.append(zl)
    zh = torch.stack(zs)
    return zh * scale, zh, failed, worst


def _no_solution(p: torch.Tensor, L: int, k: int, finite: bool):
    z = torch.zeros(L, k, dtype=torch.float64)
    if finite:  # no constraint: p~ = p
        return p.clone(), {"z": z, "residual": 0.0, "failed": 0, "active": 0}
    return torch.full_like(p, float("nan")), {"z": z, "residual": float("nan"), "failed": 0, "active": 0}


def _recover_active(p: torch.Tensor, M: torch.Tensor, z: torch.Tensor, segments: Segments) -> torch.Tensor:
    """``_recover`` with z on the host, adding only the rows whose z is not 0 (the others add 0 * M_j = 0 to
    p in float64, so the sum is the same, bit for bit, in the same order): QP_g's p~ costs its active rows."""
    segs = [(0, p.shape[-1])] if segments is None else list(segments)
    out = p.to(torch.float64, copy=True)
    for i, (a, b) in enumerate(segs):
        for j in z[i].nonzero().flatten().tolist():
            zj = z[i, j:j + 1].to(M.device)  # 1-d float64: the product is float64 (M promoted exactly)
            for c in range(a, b, _CHUNK):
                e = min(b, c + _CHUNK)
                out[c:e] = out[c:e] + zj * M[j, c:e]
    return out.to(p.dtype)


def project_large(p: torch.Tensor, M: torch.Tensor, segments: Segments = None, rho: float = 0.0,
                  tol: float = 1e-6):
    """QP_g: project p (d,) onto {y : M y >= h} for k rows M (k, d), k up to a few hundred.

    Returns (p_tilde, info) with info = {"z": (L, k) float64, "residual": float, "failed": int
    (segments whose KKT residual exceeds ``tol`` or whose active set did not converge), "active": int
    (number of positive dual variables)}. Non-finite inputs give a NaN p_tilde (failed = 0).
    """
    k = M.shape[0]
    L = 1 if segments is None else len(segments)
    if k == 0:
        return _no_solution(p, L, 0, True)
    segs = [(0, p.shape[-1])] if segments is None else list(segments)
    sol = _solve_segments(*_gram(p, M, segments), rho, tol, lambda i: (p[segs[i][0]:segs[i][1]],
                                                                        M[:, segs[i][0]:segs[i][1]]))
    if sol is None:
        return _no_solution(p, L, k, False)
    z, zh, failed, worst = sol
    out = _recover_active(p, M, z, segments)
    return out, {"z": z, "residual": worst, "failed": failed, "active": int((zh > 0).sum())}


# --------------------------------------------------------------------------------------------------
# QP_g on a memory kept as scaled rows with its Gram matrix (GradMA's ``gram="incremental"``)


def update_gram(H: torch.Tensor, U: torch.Tensor, rows: torch.Tensor, segments: Segments) -> None:
    """H (L, k, k) = U U^T per segment, in place, after the ``rows`` of U (k, d) changed: S x k dot products of
    length d (float64) instead of k x k; the block of changed rows is symmetrised, so H stays symmetric."""
    segs = [(0, U.shape[-1])] if segments is None else list(segments)
    Ur = U.index_select(0, rows)
    for i, (a, b) in enumerate(segs):
        Hr = Ur[:, a:b] @ U[:, a:b].T  # (S, k)
        H[i, rows, :] = Hr
        H[i, :, rows] = Hr.T
        block = Hr[:, rows]
        H[i, rows[:, None], rows[None, :]] = 0.5 * (block + block.T)


def project_rows(p: torch.Tensor, U: torch.Tensor, scale: torch.Tensor, H: torch.Tensor, segments: Segments = None,
                 rho: float = 0.0, tol: float = 1e-6):
    """QP_g (``project_large``'s problem and solver) for the rows M_j = scale_j U_j, U (k, d) float64, given
    H = U U^T per segment (L, k, k): G = (scale scale^T) * H and q = scale * (U p) cost one pass over U
    instead of the k x k products of length d; a row of scale 0 (an empty slot) constrains nothing (z_j = 0).
    p~ = p + sum_j z_j scale_j U_j over the positive z_j only, in float64, rounded once. Returns what
    ``project_large`` returns."""
    k = U.shape[0]
    L = 1 if segments is None else len(segments)
    segs = [(0, p.shape[-1])] if segments is None else list(segments)
    p64 = p.to(torch.float64, copy=True)
    q = torch.stack([U[:, a:b] @ p64[a:b] for a, b in segs]) * scale
    pp = torch.stack([p64[a:b] @ p64[a:b] for a, b in segs])
    sol = _solve_segments(H * (scale[:, None] * scale[None, :]), q, pp, rho, tol,
                          lambda i: (p[segs[i][0]:segs[i][1]], U[:, segs[i][0]:segs[i][1]] * scale[:, None]))
    if sol is None:
        return _no_solution(p, L, k, False)
    z, zh, failed, worst = sol
    out = _recover_active(p, U, (z.to(U.device) * scale).cpu(), segments)  # p~ = p + sum_j (z_j scale_j) U_j
    return out, {"z": z, "residual": worst, "failed": failed, "active": int((zh > 0).sum())}
