#!/usr/bin/env bash
# Sets up the delta-spark peer: .venv-delta (its own venv, never imported by serialake) with the
# pinned delta-spark and pyspark of peer/requirements.txt, and the pinned jars of peer/pom.xml in
# .venv-delta/jars. When the package registries cannot be reached, it writes the reason to
# .venv-delta/UNAVAILABLE and exits 0: the peer tests then skip with that one line. Any other
# failure fails the target.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-delta
PYTHON=${PYTHON:-python3}
mkdir -p "$VENV"
rm -f "$VENV/UNAVAILABLE" "$VENV/.installed"

unavailable() {
    echo "$1" > "$VENV/UNAVAILABLE"
    echo "delta-spark peer unavailable: $1" >&2
    exit 0
}

if ! command -v mvn >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    { apt-get update -q && apt-get install -y -q maven; } >/dev/null 2>&1
fi
command -v javac >/dev/null 2>&1 || { echo "javac (a JDK 17+) is needed to build peer/java" >&2; exit 1; }
command -v mvn >/dev/null 2>&1 || unavailable "mvn is not installed (apt-get install maven), so the delta-spark jars cannot be fetched"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV" || exit 1
if ! "$VENV/bin/python" -m pip install -q -r peer/requirements.txt; then
    # A registry that cannot be reached is a skip; a package that cannot be installed is a failure.
    "$VENV/bin/python" -m pip download -q --no-deps -d "$VENV/.probe" delta-spark==4.4.0 >/dev/null 2>&1 \
        || unavailable "PyPI could not be reached to install peer/requirements.txt"
    exit 1
fi
# serialake too, without the extras: the benchmarks run it on delta-spark's very pyspark (bench/delta_spark.py).
"$VENV/bin/python" -m pip install -q -e . || exit 1
rm -rf "$VENV/jars.new" "$VENV/s3a-jars.new"
S3A_GROUPS=org.apache.hadoop,software.amazon.awssdk,software.amazon.s3.analyticsaccelerator,org.wildfly.openssl
if ! mvn -q -B -f peer/pom.xml dependency:copy-dependencies -DoutputDirectory="$PWD/$VENV/jars.new" \
        -DexcludeGroupIds=org.scala-lang,org.apache.parquet,org.apache.logging.log4j,org.slf4j,com.fasterxml.jackson.core,com.fasterxml.jackson.datatype,org.xerial.snappy,com.github.luben,commons-logging,io.airlift,org.roaringbitmap,$S3A_GROUPS \
    || ! mvn -q -B -f peer/pom.xml dependency:copy-dependencies -DoutputDirectory="$PWD/$VENV/s3a-jars.new" \
        -DincludeGroupIds=$S3A_GROUPS -DexcludeArtifactIds=hadoop-client-api,hadoop-client-runtime; then
    mvn -q -B -U dependency:get -Dartifact=io.delta:delta-storage:4.4.0 -Dtransitive=false >/dev/null 2>&1 \
        || unavailable "Maven Central could not be reached for the delta-spark jars (peer/pom.xml)"
    exit 1
fi
# The commit gate (peer/java): delta-spark's local log store with a pause before a commit.
SPARK_JARS=$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
BUILD=$(mktemp -d)
javac -nowarn -d "$BUILD" -cp "$VENV/jars.new/*:$SPARK_JARS/*" --release 17 peer/java/serialake/peer/*.java || exit 1
(cd "$BUILD" && jar cf "$OLDPWD/$VENV/jars.new/serialake-peer-gate.jar" serialake) || exit 1
rm -rf "$BUILD"
rm -rf "$VENV/jars" && mv "$VENV/jars.new" "$VENV/jars"
rm -rf "$VENV/s3a-jars" && mv "$VENV/s3a-jars.new" "$VENV/s3a-jars"
# hadoop-aws must be the Hadoop client's own version, in delta-spark's pyspark and in serialake's.
want=$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' peer/pom.xml)
for py in "$VENV/bin/python" .venv/bin/python; do
    [ -x "$py" ] || continue
    have=$("$py" -c 'import glob, os, pyspark; print(" ".join(os.path.basename(p) for p in glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))))')
    case "$have" in
        *"hadoop-client-api-$want.jar"*) ;;
        *) echo "peer/pom.xml pins hadoop-aws $want, but $py's pyspark ships $have: set hadoop.version to match" >&2; exit 1 ;;
    esac
done
touch "$VENV/.installed"
echo "delta-spark peer ready: $("$VENV/bin/python" -c 'import importlib.metadata as m; print("delta-spark", m.version("delta-spark"), "on pyspark", m.version("pyspark"))'), $(ls "$VENV/jars" | wc -l) jars"
