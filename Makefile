# One command sets everything up and runs: `make demo` (the main demo) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-core test-spark lint bench verify verify-long check-java clean peer

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# test needs the verify and demo extras too (it names them); listed here so demo/verify never lack theirs.
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e ".[test,verify,demo]"
	touch $(STAMP)

# The delta-spark peer (its own venv .venv-delta and pinned jars): an independent reader, a
# concurrent writer and the benchmarks' anchor. Without the registries it records why, and the
# tests that need it skip with that line (peer/setup.sh).
DELTA_STAMP := .venv-delta/.installed
peer: $(DELTA_STAMP)
$(DELTA_STAMP): pyproject.toml peer/requirements.txt peer/pom.xml peer/setup.sh $(wildcard peer/java/serialake/peer/*.java)
	PYTHON=$(PYTHON) bash peer/setup.sh

check-java:
	@command -v java >/dev/null 2>&1 || { echo "Java 17+ is required for Spark: install a JDK (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }
	@java -version 2>&1 | awk -F'"' '/version/ { split($$2, v, "."); if (v[1] < 17) { print "Java 17+ is required for Spark; found " $$2; exit 1 } }'

demo: $(STAMP) check-java
	$(VENV)/bin/serialake demo

# Lint and type-check first: any finding fails the target before the tests run.
lint: $(STAMP)
	$(VENV)/bin/ruff check serialake tests bench peer
	$(VENV)/bin/mypy

test: $(STAMP) check-java lint peer
	$(PY) -m pytest -q -p no:cacheprovider

test-core: $(STAMP)
	$(PY) -m pytest -q -m "not spark and not slow"

bench: $(STAMP) check-java peer
	$(PY) -m bench.run

# The full verification (levels, DataFrames, multi-table reads and write transactions, crash trials); then the
# negative controls at Serializable (conflict checks off; multi-table write transactions committed per table).
# Then the list-append workload and the crash trials with the log on S3 (a moto server on 127.0.0.1,
# started and stopped by the command): fewer txns per process, moto serves ~10-30 commits/s.
# Then the streaming sink's exactly-once trials: 60 SIGKILLs of a pipeline (6 in make test).
# Then transactions across tables SIGKILLed on S3 (moto): every step for 2 and 3 tables and 60 random
# moments, all or nothing every time (5 trials in make test; about 1 min).
# Then the soak tests make test leaves out (pytest -m soak: the mixed delta-spark writers' audit).
# Then the row-level workload with delta-spark writers (4 serialake + 2 delta-spark processes per level,
# and its negative control; about 7 min on 2 loaded cores), or the peer's one-line reason it cannot run.
verify: $(STAMP) check-java
	$(VENV)/bin/serialake verify --processes 8 --txns 500 --dataframes --multi-table
	$(VENV)/bin/serialake verify --processes 4 --txns 200 --levels serializable --crash-trials 0 --multi-table --control
	$(VENV)/bin/serialake verify --s3 --processes 8 --txns 100
	$(MAKE) --no-print-directory peer
	if [ -f .venv-delta/.installed ]; then $(VENV)/bin/serialake verify --processes 4 --txns 800 --crash-trials 0 --control --delta-spark-python .venv-delta/bin/python --delta-spark-jars .venv-delta/jars --delta-spark-processes 2; else cat .venv-delta/UNAVAILABLE; fi
	SERIALAKE_STREAM_TRIALS=60 $(PY) -m pytest -q -p no:cacheprovider tests/spark/test_streaming_sink.py -k exactly_once
	SERIALAKE_GROUP_S3_TRIALS=60 $(PY) -m pytest -q -p no:cacheprovider tests/core/txn/test_group_crash_trials.py -k s3
	$(PY) -m pytest -q -p no:cacheprovider -m soak

# 100,000 transactions: 8 processes x 3,125 at each of the four levels/tables (docs/verification.md).
verify-long: $(STAMP)
	$(VENV)/bin/serialake verify --processes 8 --txns 3125 --control --multi-table

clean:
	rm -rf $(VENV) .venv-delta .pytest_cache
