"""delta-spark's own Python tests, run against serialake with only their imports redirected.

``python -m bench.delta_spark_tests --delta-repo PATH`` (or ``DELTA_REPO=PATH``): PATH is a
checkout of delta-io/delta, or its bare git directory (the files are read with ``git show``).
The test files (``python/delta/tests/test_deltatable.py``, ``test_sql.py``) are copied into a
temporary directory for the run, never into this repository, beside a ``delta`` package of
three small modules that redirect delta-spark's imports:

- ``delta.tables``: serialake's ``DeltaTable`` and builders (``from serialake import ...``);
- ``delta.testing.utils``: ``DeltaTestCase`` on a session set up by ``serialake.configure``
  instead of ``spark.sql.extensions`` / ``spark.sql.catalog.spark_catalog`` (the only change
  a delta-spark user makes);
- ``delta.exceptions``: serialake's exception classes under delta-spark's names.

With ``--engine delta-spark`` the same files run against the real delta-spark (``make peer``:
.venv-delta's Python, its ``delta`` package copied beside the tests with a ``delta.testing.utils``
whose session loads the pinned jars): the baseline. ``bench_rows`` runs both and reports them
side by side, with every test whose outcome differs.

Each test's outcome comes from pytest's JUnit XML; the report lists every test that did not
pass with the first line of its error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from typing import Any

TEST_FILES = ("python/delta/tests/test_deltatable.py", "python/delta/tests/test_sql.py")

_TABLES = '''"""delta-spark's ``delta.tables``, redirected to serialake."""
from serialake.spark.table import *  # noqa: F401,F403 (DeltaTable, DeltaTableBuilder, IdentityGenerator)
from serialake.spark.dml import DeltaMergeBuilder, DeltaOptimizeBuilder  # noqa: F401
'''

_UTILS = '''"""delta-spark's ``delta.testing.utils``, with serialake's session set-up."""
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager

from pyspark import SparkConf
from pyspark.testing.sqlutils import ReusedSQLTestCase

import serialake


class DeltaTestCase(ReusedSQLTestCase):
    @classmethod
    def conf(cls) -> SparkConf:
        conf = super().conf()
        conf.set("spark.app.name", cls.__name__)
        conf.set("spark.master", "local[2]")
        conf.set("spark.ui.enabled", "false")
        conf.set("spark.sql.shuffle.partitions", "5")
        conf.set("spark.sql.session.timeZone", "UTC")
        conf.set("spark.pyspark.python", sys.executable)
        return conf

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        serialake.configure(cls.spark)

    def setUp(self) -> None:
        super().setUp()
        self.tempPath = tempfile.mkdtemp()
        self.tempFile = os.path.join(self.tempPath, "tempFile")

    def tearDown(self) -> None:
        super().tearDown()
        shutil.rmtree(self.tempPath, ignore_errors=True)

    @contextmanager
    def tempTable(self):
        name = "table_" + os.urandom(4).hex()
        try:
            yield name
        finally:
            self.spark.sql(f"DROP TABLE IF EXISTS {name}")
'''

# The baseline's ``delta.testing.utils``: delta-spark's session set-up (as in delta-io/delta's own),
# with the peer's pinned jars on the class path instead of a build's.
_DELTA_UTILS = '''"""delta-spark's ``delta.testing.utils``, on the peer's jars."""
import glob
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager

from pyspark import SparkConf
from pyspark.testing.sqlutils import ReusedSQLTestCase


class DeltaTestCase(ReusedSQLTestCase):
    @classmethod
    def conf(cls) -> SparkConf:
        conf = super().conf()
        conf.set("spark.app.name", cls.__name__)
        conf.set("spark.master", "local[2]")
        conf.set("spark.ui.enabled", "false")
        conf.set("spark.sql.shuffle.partitions", "5")
        conf.set("spark.sql.session.timeZone", "UTC")
        conf.set("spark.pyspark.python", sys.executable)
        conf.set("spark.jars", ",".join(sorted(glob.glob(os.path.join(os.environ["DELTA_JARS"], "*.jar")))))
        conf.set("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        conf.set("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        return conf

    def setUp(self) -> None:
        super().setUp()
        self.tempPath = tempfile.mkdtemp()
        self.tempFile = os.path.join(self.tempPath, "tempFile")

    def tearDown(self) -> None:
        super().tearDown()
        shutil.rmtree(self.tempPath, ignore_errors=True)

    @contextmanager
    def tempTable(self):
        name = "table_" + os.urandom(4).hex()
        try:
            yield name
        finally:
            self.spark.sql(f"DROP TABLE IF EXISTS {name}")
'''

_EXCEPTIONS = '''"""delta-spark's ``delta.exceptions``, redirected to serialake."""
from serialake.exceptions import *  # noqa: F401,F403
'''


def _read(repo: str, rel: str) -> str:
    direct = os.path.join(repo, rel)
    if os.path.exists(direct):
        with open(direct) as f:
            return f.read()
    out = subprocess.run(["git", f"--git-dir={repo}", "show", f"HEAD:{rel}"], capture_output=True, text=True,
                         check=True)  # fmt: skip
    return out.stdout


def _revision(repo: str) -> str:
    git_dir = repo if not os.path.isdir(os.path.join(repo, ".git")) else os.path.join(repo, ".git")
    out = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, check=False)  # fmt: skip
    return out.stdout.strip() or "unknown"


def run(repo: str, timeout: int = 1800, *, engine: str = "serialake") -> dict[str, Any]:
    """The test files' outcomes against ``engine``: ``serialake`` (imports redirected) or
    ``delta-spark`` (the real one, the peer's environment)."""
    work = tempfile.mkdtemp(prefix="delta-spark-tests-")
    try:
        pkg = os.path.join(work, "delta")
        python = sys.executable
        env = {**os.environ, "SERIALAKE_CATALOG": os.path.join(work, "catalog")}
        if engine == "delta-spark":
            from peer.client import VENV, unavailable

            reason = unavailable()
            if reason is not None:
                raise RuntimeError(reason)
            python = str(VENV / "bin" / "python")
            installed = subprocess.run([python, "-c", "import delta, os; print(os.path.dirname(delta.__file__))"],
                                       capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
            shutil.copytree(installed, pkg)
            shims = {"testing/__init__.py": "", "testing/utils.py": _DELTA_UTILS, "tests/__init__.py": ""}
            env = {k: v for k, v in env.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
            env["DELTA_JARS"] = str(VENV / "jars")
        else:
            shims = {"__init__.py": "", "tables.py": _TABLES, "exceptions.py": _EXCEPTIONS,
                     "testing/__init__.py": "", "testing/utils.py": _UTILS, "tests/__init__.py": ""}  # fmt: skip
        os.makedirs(os.path.join(pkg, "testing"), exist_ok=True)
        os.makedirs(os.path.join(pkg, "tests"), exist_ok=True)
        for rel, text in shims.items():
            with open(os.path.join(pkg, rel), "w") as f:
                f.write(text)
        files = []
        for rel in TEST_FILES:
            target = os.path.join(pkg, "tests", os.path.basename(rel))
            with open(target, "w") as f:
                f.write(_read(repo, rel))
            files.append(target)
        report = os.path.join(work, "junit.xml")
        env["PYTHONPATH"] = os.pathsep.join([work, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               "--continue-on-collection-errors", f"--junitxml={report}", *files]  # fmt: skip
        done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        if not os.path.exists(report):
            raise RuntimeError(f"{engine}: pytest wrote no report:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return _outcomes(report) | {"revision": _revision(repo)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _outcomes(report: str) -> dict[str, Any]:
    tests: list[dict[str, str]] = []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}"
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                detail = (node.get("message") or node.text or "").strip().splitlines()[0][:200] if (
                    node.get("message") or node.text) else ""  # fmt: skip
                break
        tests.append({"test": name, "outcome": outcome, "detail": detail})
    return {"tests": tests}


def bench_rows(quick: bool) -> list[dict[str, Any]]:
    repo = os.environ.get("DELTA_REPO")
    if not repo:
        return [{"file": "-", "tests": 0, "serialake passed": 0,
                 "pass rate": "not run: set DELTA_REPO to a delta-io/delta checkout"}]  # fmt: skip
    results = {"serialake": run(repo)}
    try:
        results["delta-spark"] = run(repo, engine="delta-spark")
    except RuntimeError as e:  # the peer is not set up here: serialake's column alone
        print(e, file=sys.stderr)
    rows = []
    for rel in TEST_FILES:
        stem = os.path.basename(rel)[: -len(".py")]
        row: dict[str, Any] = {"file": f"{rel} @ {results['serialake']['revision']}"}
        for engine, result in results.items():
            mine = [t for t in result["tests"] if _in_file(t["test"], stem)]
            passed = sum(t["outcome"] == "passed" for t in mine)
            row["tests"] = len(mine)
            row[f"{engine} passed"] = passed
            row[f"{engine} pass rate"] = f"{passed / len(mine):.0%}" if mine else "-"
        rows.append(row)
    if "delta-spark" in results:
        theirs = {t["test"]: t for t in results["delta-spark"]["tests"]}
        for t in results["serialake"]["tests"]:
            other = theirs.get(t["test"])
            if other is not None and other["outcome"] != t["outcome"]:
                rows.append({"file": t["test"], "serialake passed": t["outcome"],
                             "delta-spark passed": other["outcome"],
                             "tests": (t["detail"] or other["detail"])[:120]})  # fmt: skip
    print(json.dumps({e: [t for t in r["tests"] if t["outcome"] != "passed"] for e, r in results.items()},
                     indent=1), file=sys.stderr)  # fmt: skip
    return rows


def _in_file(test: str, stem: str) -> bool:
    cls = test.split(".")[0]
    return (stem == "test_sql") == cls.startswith("DeltaSql")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--delta-repo", default=os.environ.get("DELTA_REPO"))
    ap.add_argument("--engine", choices=("serialake", "delta-spark"), default="serialake")
    args = ap.parse_args(argv)
    if not args.delta_repo:
        ap.error("give --delta-repo (a delta-io/delta checkout or its git directory) or set DELTA_REPO")
    result = run(args.delta_repo, engine=args.engine)
    tests = result["tests"]
    passed = sum(t["outcome"] == "passed" for t in tests)
    for t in tests:
        print(f"{t['outcome']:8} {t['test']}  {t['detail']}")
    print(f"\n{passed} of {len(tests)} passed against {args.engine} (delta-io/delta {result['revision']})")


if __name__ == "__main__":
    main()
