"""The ``fedrepro`` command: the top layer, which composes ``benchmark`` and ``theory``.

Imports run one way: ``algorithms`` <- ``benchmark`` (library modules) <- ``theory`` <- ``benchmark.cli``.
Nothing outside this package imports it. Each subcommand is a module here (``run``, ``status``, ``listing``, ``report``,
``bench``, ``validate``, ``theory``, ``tune``, ``claims``) with ``add_parser(sub)`` and a handler that turns
the parsed flags into plain arguments for the library; ``args`` holds the flags shared by several commands
(every Experiment field, ``--results``/``--publish``), and ``errors`` the one wrapper (``run_command``) through
which ``main`` runs every command: a bad input, Ctrl-C (with the command's ``resume_hint``) or a dead worker
ends every command the same way.
"""
from .main import build_parser, main

__all__ = ["build_parser", "main"]
