#!/usr/bin/env bash
# Compares the performance of a base revision with the working tree:
# builds progressdb-bench twice, runs the chosen scenarios of both builds
# alternated on this machine, and reports with benchstat.
#
#   scripts/bench-compare.sh BASE          (make bench-compare BASE=<rev>)
#
# Environment: BENCH (scenarios, default B9,B14), ROUNDS (alternated runs of
# each build, default 3), REPS (repetitions per run, default 2; every one is
# a sample), SCALE (the bench's -scale, default 1), GO (default go).
#
# Both builds measure with the working tree's harness: its files and the
# chosen scenarios' files are laid over the base's source, so that the same
# benchmark code measures the two servers, and a scenario the base lacks
# (B14 before it existed) is still compared. When the harness does not build
# against the base (an API it calls changed), the base's own harness is
# used, if it has -benchout, and only the benchmarks both have compare.
set -euo pipefail

base=${1:?usage: bench-compare.sh BASE}
bench=${BENCH:-B9,B14}
rounds=${ROUNDS:-3}
reps=${REPS:-2}
scale=${SCALE:-1}
GO=${GO:-go}
benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

root=$(git rev-parse --show-toplevel)
rev=$(git -C "$root" rev-parse --verify "$base^{commit}")
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-compare.XXXXXX")
trap 'rm -rf "$work"' EXIT
cmd=server/cmd/progressdb-bench

echo "bench-compare: base $base ($(git -C "$root" log -1 --format=%h "$rev")), head: the working tree; $bench, $rounds rounds of $reps" >&2

# The head: the working tree as it is.
(cd "$root" && "$GO" build -o "$work/head" ./$cmd)

# The base: its source, with the working tree's harness.
mkdir -p "$work/src"
git -C "$root" archive "$rev" | tar -x -C "$work/src"
own="$work/src-own-bench"
cp -r "$work/src/$cmd" "$own"
rm -rf "${work:?}/src/$cmd"
mkdir -p "$work/src/$cmd"
wanted=" $(echo "$bench" | tr ',' ' ' | tr '[:lower:]' '[:upper:]') "
for f in "$root/$cmd"/*.go; do
	[[ $f == *_test.go ]] || cp "$f" "$work/src/$cmd/"
done
# The scenario table lists only the chosen scenarios.
awk -v wanted="$wanted" '
	/^\t\{"B[0-9]+[A-Z]*", / {
		id = $0; sub(/^\t\{"/, "", id); sub(/".*/, "", id)
		if (index(wanted, " " id " ") == 0) next
	}
	{ print }' "$root/$cmd/main.go" >"$work/src/$cmd/main.go"
# Other scenarios' files stay while they build (shared helpers live in
# some); those that call what the base lacks are left out.
for _ in $(seq 1 20); do
	(cd "$work/src" && "$GO" build -o "$work/base" ./$cmd) 2>"$work/build.log" && break
	dropped=0
	for name in $(grep -o "^$cmd/b[0-9]*_[a-z0-9_]*\.go" "$work/build.log" | sort -u | xargs -r -n1 basename); do
		id=B${name#b}
		id=${id%%_*}
		if [[ $wanted != *" $id "* ]]; then
			rm -f "$work/src/$cmd/$name"
			dropped=1
		fi
	done
	((dropped)) || break
done
own_harness=0
if ! (cd "$work/src" && "$GO" build -o "$work/base" ./$cmd) 2>"$work/build.log"; then
	own_harness=1
	echo "bench-compare: the working tree's harness does not build against $base:" >&2
	sed 's/^/  /' "$work/build.log" >&2
	rm -rf "${work:?}/src/$cmd"
	cp -r "$own" "$work/src/$cmd"
	(cd "$work/src" && "$GO" build -o "$work/base" ./$cmd)
	if ! "$work/base" -h 2>&1 | grep -q -- -benchout; then
		echo "bench-compare: $base's own progressdb-bench has no -benchout either: nothing to compare" >&2
		exit 1
	fi
	echo "bench-compare: using $base's own harness; only the benchmarks both have compare" >&2
fi

base_only=$bench
if ((own_harness)); then
	# The base's own harness may lack some scenarios.
	base_only=$(for id in $(echo "$bench" | tr ',' ' '); do
		grep -q "{\"$id\"," "$work/src/$cmd/main.go" && echo "$id"
	done | paste -sd, -)
fi

run() { # run NAME ONLY: one run of one build, appended to NAME.txt
	[[ -n $2 ]] || return 0
	echo "bench-compare: $1 -only $2 (round $round of $rounds)" >&2
	"$work/$1" -only "$2" -reps "$reps" -scale "$scale" -out - -tmp "$work" -benchout "$work/$1.txt" >/dev/null
}
for round in $(seq 1 "$rounds"); do
	# ABBA: neither build always runs first, on a machine that drifts.
	if ((round % 2)); then
		run base "$base_only" && run head "$bench"
	else
		run head "$bench" && run base "$base_only"
	fi
done

cd "$work" && "$GO" run "$benchstat" base=base.txt head=head.txt
