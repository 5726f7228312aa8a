"""The ``fedrepro`` command: the top layer, which composes ``benchmark`` and ``theory``.

Imports run one way: ``algorithms`` <- ``benchmark`` (library modules) <- ``theory`` <- ``benchmark.cli``.
Nothing outside this package imports it. Each subcommand is a module here (``run``, ``listing``, ``report``,
``bench``, ``validate``, ``theory``, ``tune``, ``claims``) with ``add_parser(sub)`` and a handler that turns
the parsed flags into plain arguments for the library; ``args`` holds the flags shared by several commands.
"""
from .main import build_parser, main

__all__ = ["build_parser", "main"]
