"""Offline checkers: pure functions from a recorded history to a verdict.

See docs/checkers.md for the anomaly definitions and the validity policy.
"""

from checkers.result import UNKNOWN, CheckResult, compose, decide, merge_valid

__all__ = ["UNKNOWN", "CheckResult", "compose", "decide", "merge_valid"]
