"""``fedrepro --version`` (issue 47): the version and commit on stdout, exit 0 (aa98dfe had no such flag: argparse
refused it with exit 2)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmark.runs.record import code_version

ROOT = Path(__file__).resolve().parents[1]


def test_version_prints_the_package_version_on_stdout():
    code = ("import sys; from benchmark import cli\n"
            "try:\n    cli.main(['--version'])\nexcept SystemExit as e:\n    rc = e.code or 0\nelse:\n    rc = 0\n"
            "sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"fedrepro {code_version()['package']}"), (p.stdout, p.stderr)
