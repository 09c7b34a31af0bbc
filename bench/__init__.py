"""Runbell's benchmark suite: ratios to baselines measured in the same run.

``python -m bench.run`` (``make bench``; ``make bench FULL=1``) drives Runbell through its
CLI processes and HTTP API with load generators in separate processes, checks that
nothing sent was lost or doubled, and writes ``BENCHMARKS.md``. See ``bench/README.md``.

Only :mod:`bench.targets` imports ``runbell``: every in-process call (the P1 core
transaction, set-up rows, the server wrapper's hooks) goes through it, so a refactor of
``src/runbell`` changes one file here.
"""
