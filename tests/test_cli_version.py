"""``fedrepro --version`` (issue 47): the version and commit on stdout, exit 0 (aa98dfe had no such flag: argparse
refused it with exit 2)."""
from __future__ import annotations

import pytest

from benchmark import cli
from benchmark.runs.record import code_version


def test_version_prints_the_package_version_on_stdout(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code in (0, None)
    out = capsys.readouterr().out
    assert out.startswith(f"fedrepro {code_version()['package']}"), out
