#!/usr/bin/env bash
# Seeds a temporary database, runs a dry run and then a real run, and shows
# the summaries, the audit files and their verification.
set -euo pipefail
bin=${1:-./bin/progressdb}
dir=$(mktemp -d -t progressdb-demo.XXXXXX)
trap 'rm -rf "$dir"' EXIT

export PROGRESSDB_DB_PATH="$dir/data"
export PROGRESSDB_RETENTION_ENABLED=true
export PROGRESSDB_RETENTION_PERIOD=30d
export PROGRESSDB_LOG_LEVEL=warn

step() { printf '\n== %s\n' "$*"; }

step "seed: 200 threads x 20 messages x 2 versions, 25% deleted 40 days ago"
"$bin" seed --threads 200 --messages 20 --versions 2 --deleted 0.25 --deleted-age 40d

step "dry run (deletes nothing)"
"$bin" retention run --dry-run

step "real run"
"$bin" retention run

step "second run (nothing left to purge)"
"$bin" retention run

step "audit files"
find "$PROGRESSDB_DB_PATH/purge_audit" -name '*.jsonl' -print | sort
first=$(find "$PROGRESSDB_DB_PATH/purge_audit" -name '*.jsonl' | sort | sed -n 2p)
echo "first lines of $first:"
head -n 3 "$first"
echo "..."
tail -n 1 "$first"

step "verify"
"$bin" audit verify "$PROGRESSDB_DB_PATH/purge_audit"

step "status"
"$bin" retention status
