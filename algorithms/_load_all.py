"""Imports every algorithm module so that each registers itself."""
import importlib
import pkgutil

from pathlib import Path

_path = [str(Path(__file__).parent)]

_SKIP = {"core", "compress", "compression", "_load_all"}
for _mod in pkgutil.iter_modules(_path):
    if _mod.name not in _SKIP and not _mod.name.startswith("_"):
        importlib.import_module(f"{__package__}.{_mod.name}")
