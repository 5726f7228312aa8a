"""The ``fedrepro`` parser: one subcommand per module of this package."""
from __future__ import annotations

import argparse
import difflib
import inspect
import warnings

from . import bench, claims, listing, plugins, report, run, status, theory, tune, validate
from .errors import run_command


class Parser(argparse.ArgumentParser):
    """argparse's parser, with a did-you-mean where argparse has none (Python < 3.14: an unknown subcommand or
    choice; every version: an unknown flag of a subcommand, which argparse reports with the top-level usage and no
    hint, see ``parse``), and its errors in one line that says where the flags are listed (not the usage block of
    every flag)."""

    def error(self, message: str):
        import re

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m and "Did you mean" not in message and "maybe you meant" not in message:  # 3.14: argparse's own
            choices = re.findall(r"'([^']*)'", m.group(2))
            message += did_you_mean(m.group(1), choices)
        what = "commands" if self._subparsers is not None else "flags"
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the {what})\n")


def did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=3, cutoff=0.6)
    return f". Did you mean {' or '.join(close)}?" if close else ""


class _Version(argparse.Action):
    """``--version``: fedrepro's version and the commit it runs from, on stdout (read when asked)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from benchmark.runs.record import code_version

        v = code_version()
        commit = f" (git {v['git_commit'][:10]}{', uncommitted changes' if v['git_dirty'] else ''})" \
            if v.get("git_commit") else ""
        print(f"fedrepro {v['package']}{commit}")  # to stdout, as argparse's own version action does
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    own = {"suggest_on_error": True} if "suggest_on_error" in inspect.signature(argparse.ArgumentParser).parameters \
        else {}  # argparse's own did-you-mean where it has one (Python >= 3.14)
    p = Parser(prog="fedrepro", description="A reproducibility benchmark for federated-learning "
               "algorithms, with theory checks.", **own)
    p.add_argument("--version", action=_Version, help="print fedrepro's version (and git commit) and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

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
    a = parse(p, argv)
    if not getattr(a, "command", None):
        p.print_help()
        return 0
    a.func = plugins.loading(a.func)
    return run_command(a)


def parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``p.parse_args(argv)``, but an unknown flag of a subcommand is reported by that subcommand (its usage, and
    the flags it has that come closest): argparse names it with the top-level usage only."""
    a, extra = p.parse_known_args(argv)
    if not extra:
        return a
    sub = next(x for x in p._actions if isinstance(x, argparse._SubParsersAction)).choices.get(
        getattr(a, "command", None) or "", p)
    flags = [o for act in sub._actions for o in act.option_strings if o.startswith("--")]
    hints = [f"{w}: did you mean {' or '.join(c)}?" for w in extra if w.startswith("-")
             for c in [difflib.get_close_matches(w.split("=")[0], flags, n=2, cutoff=0.75)] if c]
    sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" ({'; '.join(hints)})" if hints else ""))
    return a  # not reached: error() exits
