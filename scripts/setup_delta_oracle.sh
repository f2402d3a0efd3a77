#!/usr/bin/env bash
# Sets up Delta Lake on Spark as a test oracle (issue 17), once, under .cache/:
#   .cache/delta-venv   a virtualenv with pyspark + delta-spark (test-only; the product
#                       needs no Delta jar)
#   .cache/delta-jars   Delta's jars for that Spark and their runtime dependencies, fetched
#                       from Maven Central with `mvn dependency:copy-dependencies`, so Spark
#                       never resolves packages itself and tests run without network.
# `make test` runs this through its stamp (.cache/delta-jars/.installed-stamp): a second run
# does nothing. A failure says what to fix; it never leaves a stamp behind.
set -euo pipefail
cd "$(dirname "$0")/.."

PYSPARK_VERSION=4.2.0
DELTA_PIP_VERSION=4.4.1
# delta-spark 4.4.1's configure_spark_with_delta_pip names io.delta:delta-spark_<spark
# major.minor>_2.13:<its own version>, i.e. delta-spark_4.2_2.13:4.4.1. Maven Central has no
# 4.4.1 of any io.delta artifact (delta-spark_4.2_2.13, delta-spark_2.13 and delta-storage
# alike end at 4.4.0), and the 4.4.1 Python package differs from 4.4.0's only in its version
# string, so the jars are 4.4.0's. Override with DELTA_JAR_VERSION once 4.4.1 is published.
DELTA_JAR_VERSION=${DELTA_JAR_VERSION:-4.4.0}
DELTA_ARTIFACT="delta-spark_${PYSPARK_VERSION%.*}_2.13"

CACHE=.cache
VENV=$CACHE/delta-venv
JARS=$CACHE/delta-jars
STAMP=$JARS/.installed-stamp
UV=.venv/bin/uv
WANT="pyspark=$PYSPARK_VERSION delta-spark=$DELTA_PIP_VERSION jars=io.delta:$DELTA_ARTIFACT:$DELTA_JAR_VERSION"

if [[ -f $STAMP && "$(cat "$STAMP")" == "$WANT" && -x $VENV/bin/python ]]; then
    touch "$STAMP"  # make compares its mtime with .venv's stamp
    exit 0
fi

fail() {
    echo "ERROR: setting up Delta Lake for the tests failed: $1" >&2
    echo "  Fix: $2" >&2
    echo "  Then run 'make test' again (or 'make delta-oracle' for this step alone)." >&2
    exit 1
}

[[ -x $UV ]] || fail "$UV is missing" "run 'make .venv/bin/uv' first (make test does)"
command -v java >/dev/null || fail "no java on PATH" "install a JDK 17 (apt-get install openjdk-17-jdk-headless)"
command -v mvn >/dev/null || fail "no mvn on PATH" "install Maven (apt-get install maven)"

rm -f "$STAMP"
mkdir -p "$CACHE"
echo "Delta oracle: virtualenv $VENV (pyspark $PYSPARK_VERSION, delta-spark $DELTA_PIP_VERSION)"
test -x $VENV/bin/python || python3 -m venv $VENV
PYARROW_PIN=$(grep -E '^pyarrow==' requirements.lock || echo pyarrow)
# The Makefile's wheelhouse holds PySpark built once (it is published as source only).
FIND_LINKS=()
[[ -n ${WHEELHOUSE:-} && -d ${WHEELHOUSE:-} ]] && FIND_LINKS=(--find-links "$WHEELHOUSE")
$UV pip install --quiet --compile-bytecode --python $VENV/bin/python "${FIND_LINKS[@]}" \
    "pyspark==$PYSPARK_VERSION" "delta-spark==$DELTA_PIP_VERSION" "$PYARROW_PIN" \
    || fail "uv could not install pyspark/delta-spark into $VENV" \
            "check that PyPI is reachable (uv's error is above), or delete $VENV and retry"

echo "Delta oracle: jars io.delta:$DELTA_ARTIFACT:$DELTA_JAR_VERSION from Maven Central into $JARS"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>airflow-delta.tests</groupId>
  <artifactId>delta-oracle-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>io.delta</groupId>
      <artifactId>$DELTA_ARTIFACT</artifactId>
      <version>$DELTA_JAR_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
mvn -q -B -f "$WORK/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$WORK/jars" >"$WORK/mvn.log" 2>&1 \
    || { tail -30 "$WORK/mvn.log" >&2
         fail "mvn could not fetch io.delta:$DELTA_ARTIFACT:$DELTA_JAR_VERSION and its dependencies" \
              "check that Maven Central is reachable through mvn (~/.m2/settings.xml proxies/mirrors; the log is above)"; }

# Spark ships its own Scala, Hadoop, Parquet, Jackson, logging... Those of its own jars win
# on its class path anyway; leaving Delta's older copies out keeps one of each.
SPARK_JARS=$($VENV/bin/python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
rm -rf "$JARS"
mkdir -p "$JARS"
for jar in "$WORK"/jars/*.jar; do
    name=$(basename "$jar" .jar)
    artifact=${name%-*}  # strip the version
    if compgen -G "$SPARK_JARS/$artifact-[0-9]*.jar" >/dev/null; then
        continue
    fi
    cp "$jar" "$JARS/"
done
compgen -G "$JARS/$DELTA_ARTIFACT-*.jar" >/dev/null || fail "the Delta jar is missing from $JARS" "delete $JARS and retry"
echo "$WANT" > "$STAMP"
echo "Delta oracle ready: $(ls "$JARS" | wc -l) jars in $JARS"
