"""`--engine auto` picks the pure engine for small traces and Spark for large ones or when a
master is named; the progress line keeps a long Spark wait from looking like a hang."""

from __future__ import annotations

import io
import time

import pytest

from replay import check_cmd, engine_choice
from replay.engine_choice import AUTO, PURE, SPARK, SparkProgress, choose
from replay.synthetic_traces import generate

pytestmark = pytest.mark.deadline(120)


@pytest.mark.parametrize("requested,exchanges,master,expected", [
    (AUTO, 50, None, PURE),
    (AUTO, 1_000, None, PURE),
    (AUTO, 1_001, None, SPARK),
    (AUTO, 50, "local[1]", SPARK),
    (SPARK, 50, None, SPARK),
    (PURE, 10**9, None, PURE),
])
def test_choice(requested, exchanges, master, expected, monkeypatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    got = choose(requested, exchanges, 1_000, master)
    assert got.engine == expected and got.why


def test_spark_submit_keeps_spark(monkeypatch) -> None:
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "12345")
    assert choose(AUTO, 5, 1_000, None).engine == SPARK


def test_progress_lines_while_spark_works() -> None:
    out = io.StringIO()
    with SparkProgress("check", "50 exchange(s)", out=out, every_s=0.05):
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("kipcheck check: starting Spark for 50 exchange(s)")
    assert any("still working" in line for line in lines[1:]), lines


def test_small_trace_is_checked_without_spark(tmp_path, capsys) -> None:
    """The default engine on a small trace is the pure one: no JVM starts (the summary says
    which engine ran and why)."""
    trace = tmp_path / "t"
    generate(str(trace), 200, seed=3)
    code = check_cmd.main([str(trace), "--out", str(tmp_path / "r")])
    assert code in (0, 1)
    summary = (tmp_path / "r" / "summary.json").read_text()
    assert '"engine": "pure"' in summary and engine_choice.CHECK_PURE_LIMIT > 200
