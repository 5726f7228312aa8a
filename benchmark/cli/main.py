"""The ``fedrepro`` parser: one subcommand per module of this package."""
from __future__ import annotations

import argparse
import warnings

from . import bench, claims, listing, plugins, report, run, status, theory, tune, validate
from .errors import run_command


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fedrepro", description="A reproducibility benchmark for federated-learning "
                                "algorithms, with theory checks.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    for module in (run, status, listing, theory, bench, report, validate, tune, claims):
        module.add_parser(sub)
    for command in sub.choices.values():
        plugins.add_flag(command)
    return p


def _format_warning(message, category, filename, lineno, line=None) -> str:
    from benchmark.runs.store import CorruptRecordWarning

    if issubclass(category, CorruptRecordWarning):
        return f"fedrepro: warning: {message}\n"
    return _default_format_warning(message, category, filename, lineno, line)


_default_format_warning = warnings.formatwarning


def main(argv: list[str] | None = None) -> int:
    warnings.formatwarning = _format_warning
    p = build_parser()
    a = p.parse_args(argv)
    if not getattr(a, "command", None):
        p.print_help()
        return 0
    a.func = plugins.loading(a.func)
    return run_command(a)
