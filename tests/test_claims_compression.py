"""The compression claims (theory/claims/compression.py; the quantizers' with their papers) in quick mode: every
claim HOLDS on the correct operators, a buggy error feedback is caught, and ``fedrepro theory --paper qsgd
--quick`` writes the report.
"""
from __future__ import annotations

import json

import torch

from algorithms import compress as C
from algorithms.core import Message
from theory.claims import HOLDS, VIOLATED, all_claims
from theory.claims import compression as TC

IDS = [
    "lfl.lemma1.unbiased",
    "lfl.lemma1.variance",
    "qsgd.lemma3_1.unbiased",
    "qsgd.lemma3_1.variance",
    "fedbat.operator.unbiased_in_range",
    "fedbat.operator.biased_outside_range",
    "compression.scaled_sign.biased",
    "compression.topk.biased",
    "compression.ef.residual_bounded",
    "compression.bits.honest",
]


def _claim(cid):
    (c,) = [c for c in all_claims(claim_id=cid) if c.id == cid]
    return c


def test_claims_are_registered_with_papers():
    ids = {c.id for c in all_claims() if c.paper in ("lfl", "qsgd", "fedbat", "compression")}
    assert set(IDS) <= ids


class _EFCompressesInputNotSum:
    """A classic EF bug: compress x_t instead of p_t = x_t + e_t (the residual then random-walks)."""

    def __init__(self):
        self.inner = C.get("scaled_sign")

    def encode(self, x, residual, rng=None):
        msg, _ = self.inner.encode(x, (), rng)
        return msg, residual + x - self.inner.decode(msg)


def test_ef_check_catches_a_buggy_error_feedback():
    out = TC.ef_residual_check(_EFCompressesInputNotSum(), S=16, T=600, families=("iid_gaussian",))
    assert out.verdict == VIOLATED, out.key_number
    # the correct EF on the same setting holds
    good = TC.ef_residual_check(C.get("ef"), S=16, T=600, families=("iid_gaussian",))
    assert good.evidence["iid_gaussian"]["bound_holds"]


def test_check_bits_flags_smuggled_payload():
    class MetaScale(C.Transform):  # the fp32 scale travels in the (uncounted) meta
        name = "scaled_sign"

        def encode(self, x, state=(), rng=None):
            return Message({"signs": C.pack_bits(x >= 0)},
                           {"op": self.name, "d": x.shape[-1], "scale": float(x.abs().mean())}), state

        def decode(self, m):
            d = m.meta["d"]
            return torch.where(C.unpack_bits(m["signs"], d), 1.0, -1.0) * m.meta["scale"]

    r = TC.check_bits(MetaScale(), 100)
    assert not r["ok"] and not r["meta_static"] and not r["documented"]
    assert TC.check_bits(C.get("scaled_sign"), 100)["ok"]


def test_cli_theory_qsgd_quick(tmp_path):
    from benchmark.cli import main

    rc = main(["theory", "--paper", "qsgd", "--quick", "--out", str(tmp_path)])
    assert rc == 0
    folder = tmp_path / "partial"  # a subset of the papers never overwrites the full report
    md = (folder / "report.md").read_text()
    data = json.loads((folder / "report.json").read_text())
    got = {c["id"]: c["verdict"] for c in data["claims"]}
    assert {c["paper"] for c in data["claims"]} == {"qsgd"}
    mine = {"qsgd.lemma3_1.unbiased", "qsgd.lemma3_1.variance"}
    assert mine <= set(got) and all(got[cid] == HOLDS for cid in mine), got
    assert all(c["quick"] for c in data["claims"])
    for cid in mine:
        assert cid in md
    assert "Lemma 3.1" in md and "HOLDS" in md


def test_fedbat_uplink_and_the_checked_operator_are_one_binarizer():
    # FedBAT's upload of a one-layer update is bit for bit the binarize operator's message with the same alpha
    # and noise: the operator claims (fedbat.operator.*) test the code the algorithm sends with
    import algorithms
    from algorithms.core import ParamLayout

    d = 37
    alg = algorithms.make("fedbat", ParamLayout.single(d), 1, {})
    g = torch.Generator().manual_seed(0)
    m, zeta = torch.randn(d, generator=g), torch.rand(d, generator=g)
    for alpha in (float(m.abs().max()), 0.5 * float(m.abs().max())):
        up = alg.encode(m, torch.tensor([alpha]), zeta)
        ref = C.get("binarize", alpha=alpha).encode_with(m, torch.tensor(alpha), zeta)
        assert torch.equal(up["signs"], ref["signs"]) and up.bits == ref.bits == 8 * 5 + 32
        assert torch.allclose(alg.decode(up), C.get("binarize", alpha=alpha).decode(ref))
