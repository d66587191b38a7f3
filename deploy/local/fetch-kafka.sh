#!/usr/bin/env bash
# Fetch the Apache Kafka broker jars (and the slf4j->log4j2 binding) from Maven Central into
# $WEFT_CACHE/kafka-<version>/, unless they are already there. Prints the folder.
#
#   deploy/local/fetch-kafka.sh            # version from WEFT_KAFKA_VERSION (default 4.1.1)
#   WEFT_KAFKA_VERSION=4.2.0 WEFT_LOG4J_VERSION=2.25.3 deploy/local/fetch-kafka.sh
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=lib.sh
source "$WEFT_REPO/deploy/local/lib.sh"

dest="$WEFT_CACHE/kafka-$WEFT_KAFKA_VERSION"
marker="$dest/.weft-complete"

if [[ -f "$marker" ]]; then
    echo "$dest"
    exit 0
fi

command -v mvn >/dev/null 2>&1 || die "mvn (Maven) not found: run deploy/local/bootstrap.sh"
command -v java >/dev/null 2>&1 || die "java not found: run deploy/local/bootstrap.sh"

say "fetching Kafka $WEFT_KAFKA_VERSION jars from Maven Central into $dest" >&2
tmp="$dest.partial.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
mvn_log="$(mktemp)"
if ! mvn -q -B -f "$WEFT_REPO/deploy/pom.xml" dependency:copy-dependencies \
    -Dkafka.version="$WEFT_KAFKA_VERSION" \
    -Dlog4j.version="$WEFT_LOG4J_VERSION" \
    -DincludeScope=runtime \
    -DoutputDirectory="$tmp" >"$mvn_log" 2>&1; then
    tail -n 40 "$mvn_log" >&2
    rm -rf "$tmp" "$mvn_log"
    die "mvn dependency:copy-dependencies failed for Kafka $WEFT_KAFKA_VERSION"
fi
rm -f "$mvn_log"
[[ -f "$tmp/kafka_2.13-$WEFT_KAFKA_VERSION.jar" ]] ||
    die "kafka_2.13-$WEFT_KAFKA_VERSION.jar missing after copy-dependencies"
ls "$tmp" >"$tmp/.weft-complete"
rm -rf "$dest"
mv "$tmp" "$dest"
say "Kafka jars ready: $(($(wc -l <"$marker"))) jars in $dest" >&2
echo "$dest"
