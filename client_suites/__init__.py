"""Client libraries' own integration suites run against a kipcheck target (issue 26): outside
evidence next to the conformance suites. `runner.py` is the generic part (build once, run each
test under a deadline, judge rows against the deviation register); each suite is one adapter
(`franz_go/`). See docs/clients.md."""
