"""The plugin's per-config state (one per pytest process) and the stash keys it keeps on
test items."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from targets.target import TargetSpec
from registers.catalog import get_catalog

from conformance.target_health import TargetHealth
from conformance.target_pool import TargetPool

NOT_SUPPORTED_PREFIX = "not supported by target: "
# Set by pytest_keyboard_interrupt (conformance/run_record.py): a SIGINT, not another early stop.
KEYBOARD_INTERRUPT: list[bool] = []


@dataclass
class KipcheckState:
    config: pytest.Config
    specs: list[TargetSpec]
    worker: str
    results_dir: Path | None
    differential: bool
    catalog_dir: str | None
    pool: TargetPool
    token: str = field(default_factory=lambda: secrets.token_hex(3))
    started_at: float = field(default_factory=time.time)
    counter: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    divergences: int = 0
    skipped_targets: dict[str, str] = field(default_factory=dict)
    failed_targets: dict[str, str] = field(default_factory=dict)
    selected: int | None = None
    deselected: int = 0
    rows_seen: int = 0
    worker_crashes: list[str] = field(default_factory=list)
    health: TargetHealth = field(default_factory=TargetHealth)

    @property
    def keyboard_interrupt(self) -> bool:
        return bool(KEYBOARD_INTERRUPT)
    _catalog: Any = None
    _catalog_error: BaseException | None = None

    def catalog(self) -> Any:
        if self._catalog is None and self._catalog_error is None:
            try:
                self._catalog = get_catalog(self.catalog_dir)
            except Exception as exc:  # noqa: BLE001
                self._catalog_error = exc
        if self._catalog_error is not None:
            raise self._catalog_error
        return self._catalog

    def next_counter(self) -> int:
        self.counter += 1
        return self.counter


STATE_KEY = pytest.StashKey[KipcheckState]()
PHASES_KEY = pytest.StashKey[dict]()
DIVERGENCES_KEY = pytest.StashKey[list]()
NOT_SUPPORTED_KEY = pytest.StashKey[str]()
TARGET_DOWN_KEY = pytest.StashKey[dict]()  # the Down row of a test not run because its target is quiet
TARGET_RESUMED_KEY = pytest.StashKey[dict]()  # on the first test after a quiet target answered again


def state_of(config: pytest.Config) -> KipcheckState:
    return config.stash[STATE_KEY]
