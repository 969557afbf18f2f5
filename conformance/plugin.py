"""kipcheck pytest plugin (entry point ``pytest11: kipcheck = conformance.plugin``).

Options
  --target SPEC            target to test (repeatable, comma lists allowed); default
                           ``reference``; env ``KIPCHECK_TARGETS`` (comma separated) when
                           no --target is given
  --kipcheck-results DIR   write result rows (results-<worker>.jsonl), target
                           descriptions (targets-<worker>.json) and session.json
  --no-differential        do not run differential scenarios on the reference
  --kipcheck-catalog DIR   requirement catalog directory (default: the packaged one)
  --kipcheck-deadline-scale F  multiply every test's deadline by F
  --kipcheck-deadline S    every test's deadline is S seconds (certify --test-timeout)

Marker ``deadline(seconds)``: the test's deadline (default conformance.deadlines); past
it the test fails with ``did not finish within N s`` and ``timed_out: true`` in its row.
Non-pass rows carry ``evidence`` (conformance/evidence.py); the controller writes
``run.json`` (conformance/run_status.py) at session finish.

Marker ``requirement(*ids)``: mandatory for tests under ``conformance/suites/``; ids
must be in the catalog. Both are collection errors. ``target_kinds(*kinds)`` restricts a
test to target kinds (others: skipped).

Fixtures: ``target`` (parametrized over the selected targets), ``reference``,
``capabilities``, ``unique``, ``differential``, ``kipcheck_targets`` (the pool).

Verdicts per test: pass | fail | not_supported | error | skipped. NotSupportedByTarget
raised in setup or in the test becomes ``not_supported`` (pytest shows a skip whose
reason starts with "not supported by target:"), never a pass.

Hook for other plugins/conftests: ``pytest_kipcheck_create_target(spec, config)``
(firstresult) may return a Target instance for a spec; default `create_target`.

The plugin is split by job; this module is what pytest loads, so every hook and fixture
is imported here (listed in ``__all__``), which keeps them one plugin in one place of
pytest's hook order:

  conformance/options.py      command-line options, the selected target specs
  conformance/target_pool.py  the per-process target pool
  conformance/state.py        per-config state and the stash keys on test items
  conformance/items.py        what a test item says: suite, requirement ids, target spec
  conformance/collection.py   requirement-marker check, parametrization, target_kinds
                              skips, registered deviations' xfails, slow tests' order
  conformance/fixtures.py     target, reference, capabilities, unique, differential
  conformance/runtest.py      per-phase deadlines, not_supported conversion, allure labels
  conformance/deadlines.py    the deadline timer and its per-phase budget
  conformance/scheduling.py   xdist scheduling hooks, retiring a done cluster target
  conformance/evidence.py     evidence on non-pass rows, the raw-client exchange recorder
  conformance/rows.py         result rows and the terminal summary
  conformance/run_record.py   selection counts, crashes, session.json and run.json
"""

from __future__ import annotations

from pathlib import Path

import pytest

from targets.target import Target, TargetSpec

from conformance import deadlines
from conformance.collection import pytest_collection_modifyitems, pytest_generate_tests, pytest_make_collect_report
from conformance.fixtures import capabilities, differential, kipcheck_targets, reference, target, unique
from conformance.options import is_xdist_worker, pytest_addoption, selected_specs, worker_id
from conformance.rows import ReportCounter, pytest_runtest_makereport, pytest_terminal_summary
from conformance.run_record import (
    pytest_collection_finish,
    pytest_deselected,
    pytest_handlecrashitem,
    pytest_keyboard_interrupt,
    pytest_sessionfinish,
    pytest_testnodedown,
    pytest_xdist_node_collection_finished,
)
from conformance.runtest import pytest_runtest_call, pytest_runtest_setup, pytest_runtest_teardown
from conformance.scheduling import pytest_configure_node, pytest_xdist_make_scheduler
from conformance.state import KEYBOARD_INTERRUPT, STATE_KEY, KipcheckState
from conformance.target_pool import TargetPool

__all__ = [
    # hooks
    "pytest_addhooks", "pytest_addoption", "pytest_configure",
    "pytest_make_collect_report", "pytest_generate_tests", "pytest_collection_modifyitems",
    "pytest_deselected", "pytest_collection_finish", "pytest_xdist_node_collection_finished",
    "pytest_testnodedown", "pytest_handlecrashitem", "pytest_configure_node", "pytest_xdist_make_scheduler",
    "pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown", "pytest_runtest_makereport",
    "pytest_keyboard_interrupt", "pytest_sessionfinish", "pytest_terminal_summary",
    # fixtures
    "kipcheck_targets", "target", "reference", "capabilities", "unique", "differential",
]


# -- hook specification ------------------------------------------------------------------


class KipcheckHookSpecs:
    @pytest.hookspec(firstresult=True)
    def pytest_kipcheck_create_target(self, spec: TargetSpec, config: pytest.Config) -> Target | None:
        """Return a (not yet started) Target for spec, or None to use the default factory."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(KipcheckHookSpecs)


# -- configuration ------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requirement(*ids): requirement ids from conformance/catalog this test checks")
    config.addinivalue_line("markers", "target_kinds(*kinds): restrict a test to target kinds")
    config.addinivalue_line("markers", "deadline(seconds): this test's deadline (default: conformance.deadlines)")
    KEYBOARD_INTERRUPT.clear()
    deadlines.report_to_stderr_as_it_is_now()
    results = config.getoption("kipcheck_results")
    results_dir = Path(results).resolve() if results else None
    state = KipcheckState(
        config=config,
        specs=selected_specs(config),
        worker=worker_id(config),
        results_dir=results_dir,
        differential=not config.getoption("kipcheck_no_differential"),
        catalog_dir=config.getoption("kipcheck_catalog"),
        pool=TargetPool(config),
    )
    config.stash[STATE_KEY] = state
    config.pluginmanager.register(ReportCounter(state), "kipcheck-report-counter")
    if results_dir is not None and not is_xdist_worker(config):
        results_dir.mkdir(parents=True, exist_ok=True)
        # seal.json too: it sealed the rows this run replaces (reports/seal.py)
        for pattern in ("results-*.jsonl", "targets-*.json", "session.json", "expected.json", "run.json", "seal.json"):
            for old in results_dir.glob(pattern):
                old.unlink()
