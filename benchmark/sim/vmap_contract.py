"""Telling a local update that ``torch.func.vmap`` refuses (the Algorithm contract, item 6 of the README's "Add your own
algorithm") from an error of the computation itself, and saying it in words (``VmapContractError``)."""
from __future__ import annotations


def torch_says(cause: BaseException) -> str:
    """The first line of torch's message (or the exception's type when it has none), for an error said in words."""
    text = str(cause).strip()
    return text.splitlines()[0] if text else type(cause).__name__


VMAP_REFUSALS = ("vmap:", "data-dependent control flow", "Batching rule not implemented")


def is_vmap_refusal(e: BaseException) -> bool:
    """Whether ``e`` is torch.func.vmap refusing what a local update does (``.item()``, a Python ``if`` on a
    tensor's value, an op without a batching rule), not an error of the computation itself."""
    return isinstance(e, RuntimeError) and any(k in str(e) for k in VMAP_REFUSALS)


class VmapContractError(ValueError):
    """An algorithm's ``local_update`` that cannot run under ``torch.func.vmap`` (the Algorithm contract, item 6
    of the README's "Add your own algorithm"): an input to fix, said in words, not a traceback."""

    def __init__(self, name: str, cause: BaseException):
        super().__init__(
            f"algorithm {name!r}: its local_update cannot run under torch.func.vmap, which the vectorized executor "
            f"uses to run all sampled clients at once (torch says: {torch_says(cause)}). The Algorithm contract (README, 'Add "
            "your own algorithm', item 6; algorithms/core/base.py): no .item() or float() of a tensor, no Python "
            "`if` on a tensor's value (use torch.where), no global random generator (use ctx.rng). Meanwhile "
            "`--executor sequential` runs it one client at a time; `pytest --fedrepro-plugin FILE` checks the whole "
            "contract")
