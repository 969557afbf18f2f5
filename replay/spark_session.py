"""One place that makes the SparkSession for the trace jobs (`kipcheck diff`, `kipcheck check`).

Local mode (`local[2]`) unless told otherwise. Under `spark-submit --master URL` the master
is already set in the Spark conf, and `--master` on our own CLI sets it explicitly; either
way the job code is the same. On a non-local master the kipcheck packages are zipped and
shipped with `addPyFile` (unless spark-submit already shipped the zip with `--py-files`;
`python -m replay.spark_session zip DIR` writes it), because grouped-map functions run our
reference models on the executors, which do not have kipcheck installed.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

DEFAULT_MASTER = "local[2]"
DEFAULT_SHUFFLE_PARTITIONS = "8"  # ours, unless spark-submit / --conf set another
PACKAGES = ("replay", "clients", "checkers", "rules", "targets", "reports", "registers", "reference_impl")  # replay and every floor below it (tests/test_layers.py)
_ROOT = Path(__file__).resolve().parent.parent


_FILE_IN_MESSAGE = re.compile(r"file:(?://)?(/[^\s'\"\]),]+\.parquet)")  # Spark names the file it failed on
LOG_ENV = "KIPCHECK_SPARK_LOG"  # where Spark's own log4j output goes (default: a file in the temp dir)
_LOG4J2 = """status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss.SSS}} %-5level %logger{{1}} - %msg%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


def spark_log_path() -> str:
    return os.environ.get(LOG_ENV) or os.path.join(tempfile.gettempdir(), f"kipcheck-spark-{os.getuid()}.log")


def _quiet_java_options() -> str:
    """Spark 4 on Java 17 needs no --add-opens for our use. Spark's log4j output (task
    failures come with whole Java stacks) goes to a log file, never to our stdout/stderr:
    the commands print one line per failure themselves."""
    conf = Path(tempfile.gettempdir()) / f"kipcheck-log4j2-{os.getuid()}.properties"
    conf.write_text(_LOG4J2.format(log=spark_log_path()))
    return f"-Dlog4j2.configurationFile=file:{conf}"


def failure_line(exc: BaseException) -> str:
    """One line for a failed Spark job: the Java exception's own message (its first line),
    never the Py4J wrapper's Java stack."""
    java = getattr(exc, "java_exception", None)
    text = str(java.getMessage() if java is not None else exc) or type(exc).__name__
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    files = sorted(set(_FILE_IN_MESSAGE.findall(text)))
    if files and files[0] not in first:
        first += f" (file {files[0]})"
    where = f" (Spark log: {spark_log_path()})" if java is not None else ""
    return f"{type(exc).__name__}: {first}{where}"


def spark_home_bin(name: str) -> str:
    """A launcher of the Spark distribution pyspark installs (spark-submit, spark-class)."""
    import pyspark  # heavy dependency: only a Spark run needs it

    return os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "bin", name)


ZIP_NAME = "kipcheck_packages.zip"


def package_zip(dest_dir: str | None = None) -> str:
    """Zip the kipcheck packages (sources only) for shipping to executors."""
    dest = Path(dest_dir or tempfile.mkdtemp(prefix="kipcheck-pyfiles-")) / ZIP_NAME
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for pkg in PACKAGES:
            for path in sorted((_ROOT / pkg).rglob("*")):
                if path.suffix in (".py", ".yaml") and "__pycache__" not in path.parts and "tests" not in path.parts:
                    zf.write(path, path.relative_to(_ROOT).as_posix())
    return str(dest)


def get_spark(app_name: str, master: str | None = None, conf: dict[str, str] | None = None) -> Any:
    """The active SparkSession, or a new one.

    master: explicit master URL; None keeps what spark-submit configured, else local[2].
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext  # heavy dependency: only a Spark run needs it
    from pyspark.sql import SparkSession  # heavy dependency: only a Spark run needs it

    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        # under spark-submit its JVM holds the conf (--master, --conf): without the gateway up,
        # SparkConf() is empty and the master would silently become local[2]
        SparkContext._ensure_initialized()
    base = SparkConf()
    if (master or base.get("spark.master", DEFAULT_MASTER)).startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not base.contains("spark.master"):
        builder = builder.master(DEFAULT_MASTER)
    defaults = {
        "spark.sql.shuffle.partitions": DEFAULT_SHUFFLE_PARTITIONS,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": _quiet_java_options(),
        # the persisted exchanges of a 10M-exchange trace do not fit the 1 GiB local-mode
        # default heap (check and diff both died with OutOfMemoryError: Java heap space)
        "spark.driver.memory": "4g",
    }
    for key, value in {**defaults, **(conf or {})}.items():
        if not base.contains(key):
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    sc = spark.sparkContext
    # shipped by spark-submit --py-files, or by an earlier get_spark of this session: a second
    # addPyFile of the name from another temporary directory is refused by Spark
    shipped = [sc.getConf().get("spark.submit.pyFiles", ""), *sc.listFiles]
    if not sc.master.startswith("local") and not any(ZIP_NAME in s for s in shipped):
        sc.addPyFile(package_zip())
    return spark


if __name__ == "__main__":  # python -m replay.spark_session zip [DIR]: the --py-files zip
    if len(sys.argv) < 2 or sys.argv[1] != "zip":
        print("usage: python -m replay.spark_session zip [DIR]", file=sys.stderr)
        sys.exit(2)
    print(package_zip(sys.argv[2] if len(sys.argv) > 2 else None))
