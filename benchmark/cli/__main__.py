"""``python -m benchmark.cli``: the ``fedrepro`` command from a source tree."""
import sys

from .main import main

sys.exit(main())
