"""Speed and memory measurements of kipcheck's reference broker (not a test suite).

Run ``python -m benchmarks.run`` (``--quick`` for a short run, ``--json OUT`` to keep the
numbers); see benchmarks/README.md.
"""
