"""The nightly chaos workflow and the tox env are well-formed and run what they claim."""

from __future__ import annotations

import configparser
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_nightly_workflow():
    wf = yaml.safe_load((REPO / ".github/workflows/chaos-nightly.yml").read_text())
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert on["schedule"][0]["cron"].split()[0].isdigit()
    assert "seed" in on["workflow_dispatch"]["inputs"]
    job = wf["jobs"]["chaos"]
    assert 0 < job["timeout-minutes"] <= 60
    assert "reference:nodes=3" in job["strategy"]["matrix"]["target"]
    steps = {s.get("name", s.get("uses")): s for s in job["steps"]}
    run = steps["chaos run"]["run"]
    assert "kipcheck chaos" in run and '--seed "$SEED"' in run and "--out" in run
    upload = steps["upload artefacts"]
    assert upload["uses"].startswith("actions/upload-artifact@") and upload["if"] == "always()"
    assert upload["with"]["path"] == "chaos-out/"


def test_tox_chaos_env():
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(REPO / "tox.ini")
    assert "chaos/tests" in cp["testenv:chaos"]["commands"]


def test_nightly_calibration_job():
    """>= 100 calibration runs per implementation believed correct (docs/chaos.md)."""
    job = yaml.safe_load((REPO / ".github/workflows/chaos-nightly.yml").read_text())["jobs"]["calibrate"]
    assert set(job["strategy"]["matrix"]["target"]) == {"reference:nodes=3", "kafka-native:nodes=3"}
    run = next(s["run"] for s in job["steps"] if s.get("name") == "calibration")
    assert "python -m chaos.calibrate" in run and "--target '${{ matrix.target }}'" in run
    assert int(run.split("--runs ")[1].split()[0]) >= 100
    assert job["timeout-minutes"] <= 360  # GitHub's cap for a hosted job
