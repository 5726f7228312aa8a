"""The parameter layout (the Algorithm contract: ``core.base``): parameters travel as one flat vector per model
(``torch.nn.utils.parameters_to_vector`` order), and a ``ParamLayout`` knows each tensor's slice and kind, so
per-layer operators (FedBAT's alpha, fp32 norm layers) are possible."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch


@dataclass(frozen=True)
class ParamSlice:
    name: str
    start: int
    stop: int
    shape: tuple[int, ...]
    kind: str  # "weight" (conv/linear weight), "bias", "norm" (BN/GN/LN affine), "other"

    @property
    def numel(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class ParamLayout:
    """Where each named tensor of a model lives in the flat parameter vector."""

    slices: tuple[ParamSlice, ...]

    def __post_init__(self):
        # the slices' lengths when they tile the vector from 0 in order (``unflatten``'s one ``split``), else ():
        # a plain attribute, so a compiled forward reads a constant instead of tracing a search
        start, sizes = 0, []
        for s in self.slices:
            if s.start != start:
                sizes = []
                break
            sizes.append(s.numel)
            start = s.stop
        object.__setattr__(self, "_split", tuple(sizes))

    @property
    def size(self) -> int:
        return self.slices[-1].stop if self.slices else 0

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.slices]

    def __len__(self) -> int:
        return len(self.slices)

    @staticmethod
    def from_module(module: torch.nn.Module) -> "ParamLayout":
        kinds: dict[str, str] = {}
        for mod_name, mod in module.named_modules():
            for p_name, _ in mod.named_parameters(recurse=False):
                full = f"{mod_name}.{p_name}" if mod_name else p_name
                if isinstance(mod, (torch.nn.modules.batchnorm._NormBase, torch.nn.GroupNorm,
                                    torch.nn.LayerNorm)):
                    kinds[full] = "norm"
                elif p_name == "bias":
                    kinds[full] = "bias"
                elif p_name == "weight" and isinstance(mod, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)):
                    kinds[full] = "weight"
                else:
                    kinds[full] = "other"
        slices, start = [], 0
        for name, p in module.named_parameters():
            n = p.numel()
            slices.append(ParamSlice(name, start, start + n, tuple(p.shape), kinds.get(name, "other")))
            start += n
        return ParamLayout(tuple(slices))

    @staticmethod
    def single(d: int, name: str = "x", kind: str = "weight") -> "ParamLayout":
        """A layout with one tensor of d entries (toy problems, compressors)."""
        return ParamLayout((ParamSlice(name, 0, d, (d,), kind),))

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of ``flat`` with each tensor's shape (works under vmap and grad). One ``torch.split`` where the
        slices tile the vector (every layout of a model does): its backward writes the flat gradient once (a
        ``cat`` of the tensors' gradients), where slicing tensor by tensor made one zero-filled flat-sized
        gradient per tensor and added them up (``slice_backward`` + ``add``, about 3 x (tensors - 1) flat
        vectors of memory traffic per step). The same views and values either way; slices with gaps, or a
        vector longer than the layout, are sliced tensor by tensor."""
        if self._split and sum(self._split) == flat.shape[0]:
            return {s.name: t.view(s.shape) for s, t in zip(self.slices, torch.split(flat, self._split))}
        return {s.name: flat[s.start:s.stop].view(s.shape) for s in self.slices}

    def flatten(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([tensors[s.name].reshape(-1) for s in self.slices])

    def segment_ids(self, device=None) -> torch.Tensor:
        """Tensor of length ``size`` with the index of the slice each entry belongs to."""
        counts = torch.tensor([s.numel for s in self.slices], device=device)
        return torch.repeat_interleave(torch.arange(len(self.slices), device=device), counts)

    def mask(self, kinds: tuple[str, ...], device=None) -> torch.Tensor:
        """Boolean mask of the entries whose slice kind is in ``kinds``."""
        m = torch.zeros(self.size, dtype=torch.bool, device=device)
        for s in self.slices:
            if s.kind in kinds:
                m[s.start:s.stop] = True
        return m
