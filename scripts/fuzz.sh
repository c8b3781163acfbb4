#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (default 60s), one
# after the other: go test runs one -fuzz target at a time, and a fuzz run
# already keeps every core busy. New targets are found by name, so none is
# forgotten.
#
#   scripts/fuzz.sh                 # each target for 60s
#   FUZZTIME=10m scripts/fuzz.sh    # a longer run
#   scripts/fuzz.sh FuzzRedactURL   # only the targets whose name matches
#
# A failure stops the run; go test writes the failing input under the
# package's testdata/fuzz/<target>/, where committing it makes it a
# regression test that every plain `go test` run replays.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime="${FUZZTIME:-60s}"
filter="${1:-.}"

targets=$(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' . |
	while read -r file; do
		dir=$(dirname "$file")
		grep -oE '^func Fuzz[A-Za-z0-9_]*' "$file" | sed "s|^func |$dir |"
	done | grep -E " .*${filter}" | sort)
if [ -z "$targets" ]; then
	echo "no fuzz target matches $filter" >&2
	exit 1
fi

while read -r dir name; do
	echo "== $name ($dir) for $fuzztime"
	go test "$dir" -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime"
done <<<"$targets"
echo "all fuzz targets passed ($fuzztime each)"
