"""Every report writer of the benchmark: leaderboards and ``runs.csv`` (``leaderboard``, with ``columns``),
their plots (``plots``, one style per method from ``style``), the theory report (``theory_report``) and the
comparison of two versions (``compare``). They take plain data (records, verdicts) and write files."""
