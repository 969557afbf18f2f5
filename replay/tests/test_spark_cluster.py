"""`kipcheck check` and `kipcheck diff` on a real Spark standalone cluster (issue 13, item 3).

A master and two workers on loopback (replay.spark_standalone: the pyspark distribution's
`spark-class` Master / Worker), whose executors run a Python venv WITHOUT kipcheck (only
numpy, pandas, pyarrow, kio and cramjam, cached under ~/.cache/kipcheck); both commands go through
`spark-submit --master spark://127.0.0.1:PORT` with the project shipped as documented in
docs/trace-checks.md (`--py-files` zip from `python -m replay.spark_session zip`). Their
results must equal the pure engine's on the same traces (and the pure engine's equal
local mode's: test_check_parity, test_diff_spark).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from replay.synthetic_traces import build_table, write_segments
from replay import diff_pure
from replay.compact import compact
from replay.check_pure import check_table
from replay.diff_input import inspect_trace
from replay.spark_session import package_zip, spark_home_bin
from replay.spark_standalone import StandaloneCluster, executor_venv
from replay.synthetic_diff_traces import make_traces

ROOT = Path(__file__).resolve().parents[2]
SUBMIT_TIMEOUT_S = 800


def submit(master: str, pyfiles: str, executor_python: str, script: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [spark_home_bin("spark-submit"), "--master", master, "--py-files", pyfiles,
           "--conf", f"spark.pyspark.python={executor_python}", "--conf", f"spark.pyspark.driver.python={sys.executable}",
           "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=1g",
           "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false",
           str(ROOT / "replay" / script), *args]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT),
                            start_new_session=True)  # its own group: the JVM and the Python driver it starts
    try:
        out, err = proc.communicate(timeout=SUBMIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"spark-submit {script} did not finish within {SUBMIT_TIMEOUT_S} s; stderr tail: {err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


# `--master spark://...` without spark-submit: get_spark ships the packages itself, once per
# session however often a command asks for the session (a second addPyFile of the zip from
# another temporary directory was refused: the benchmark's standalone check died of it)
WITHOUT_SUBMIT = """
from replay.spark_session import get_spark
spark = get_spark("kipcheck-direct", {master!r}, {{"spark.executor.memory": "512m"}})
spark = get_spark("kipcheck-direct", {master!r})
print(spark.sparkContext.parallelize([1, 2], 2).map(lambda _: __import__("replay").__name__).collect())
spark.stop()
"""


def without_submit(master: str, executor_python: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": executor_python, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run([sys.executable, "-c", WITHOUT_SUBMIT.format(master=master)], capture_output=True,
                          text=True, env=env, cwd=str(ROOT), timeout=SUBMIT_TIMEOUT_S)


def executor_apps(cluster: StandaloneCluster) -> set[str]:
    """Applications whose executors the workers launched (a worker gives each one a
    directory app-<id> under its work dir): evidence the jobs ran on the cluster."""
    return {p.name for p in Path(cluster.work_dir).glob("worker-*/app-*")}


def _key(r: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in r.items()))


@pytest.mark.deadline(2700)  # venv (cached), cluster start, two submits: minutes each on shared cores
@pytest.mark.slow(5)  # the suite's longest test: started first, so it is not the run's tail
def test_check_and_diff_on_a_standalone_cluster_equal_the_pure_engine(tmp_path) -> None:
    exec_py = executor_venv()
    probe = subprocess.run([exec_py, "-c", "import replay"], capture_output=True, text=True, cwd="/", timeout=120,
                           env={"PATH": os.environ.get("PATH", "")})
    assert probe.returncode != 0, "the executor venv must not see kipcheck"
    table, injected = build_table(1300, seed=7)
    write_segments(table, str(tmp_path / "trace"))
    a_dir, b_dir, expected_diff = make_traces(str(tmp_path / "diff"), 1300, seed=3)
    pyfiles = package_zip(str(tmp_path))
    with StandaloneCluster(exec_py, workers=2) as cluster:
        check = submit(cluster.master_url, pyfiles, exec_py, "check_cmd.py", str(tmp_path / "trace"),
                       "--out", str(tmp_path / "check"))
        assert check.returncode == 1, check.stderr[-3000:]
        compact(str(tmp_path / "trace"), buckets=2)  # schema 3: the event table's buckets, one task each
        check3 = submit(cluster.master_url, pyfiles, exec_py, "check_cmd.py", str(tmp_path / "trace.v3"),
                        "--out", str(tmp_path / "check3"))
        assert check3.returncode == 1, check3.stderr[-3000:]
        diff = submit(cluster.master_url, pyfiles, exec_py, "diff_cmd.py", a_dir, b_dir, "--out", str(tmp_path / "dr"),
                      "--no-json")
        assert diff.returncode == 1, diff.stderr[-3000:]
        for d in (a_dir, b_dir):  # schema 3: the bucket-by-bucket join on the cluster's executors
            compact(d, buckets=2)
        diff3 = submit(cluster.master_url, pyfiles, exec_py, "diff_cmd.py", a_dir + ".v3", b_dir + ".v3", "--out",
                       str(tmp_path / "dr3"), "--no-json", "--engine", "spark")
        assert diff3.returncode == 1, diff3.stderr[-3000:]
        direct = without_submit(cluster.master_url, exec_py)
        assert direct.returncode == 0 and direct.stdout.strip().endswith("['replay', 'replay']"), direct.stderr[-3000:]
        apps = executor_apps(cluster)
    got = {(r["rule_id"], r["entity"], r["seq"]) for r in pq.read_table(tmp_path / "check" / "violations.parquet").to_pylist()}
    assert got == {(v["rule_id"], v["entity"], v["seq"]) for v in check_table(table)}
    assert {(rule, seq) for rule, _, seq in got} == set(injected) and len(injected) == 11
    got3 = {(r["rule_id"], r["entity"], r["seq"]) for r in pq.read_table(tmp_path / "check3" / "violations.parquet").to_pylist()}
    assert got3 == got
    pure, _ = diff_pure.run(inspect_trace(a_dir), inspect_trace(b_dir), None, False)
    rows = pq.read_table(tmp_path / "dr" / "divergences.parquet").to_pylist()
    assert sorted(map(_key, rows)) == sorted(map(_key, pure.to_pylist()))
    assert {(r["kind"], r["a_seq"], r["path"]) for r in rows} == expected_diff
    rows3 = pq.read_table(tmp_path / "dr3" / "divergences.parquet").to_pylist()
    assert sorted(map(_key, rows3)) == sorted(map(_key, pure.to_pylist()))
    assert len(apps) == 5, f"executors of {len(apps)} application(s) on the workers: the jobs did not run on the cluster"
