#!/bin/sh
# Fails when a native fuzz target (func FuzzX in a _test.go file) is not
# run by `make fuzz`, so that a new parser's target cannot be forgotten.
set -eu
cd "$(dirname "$0")/.."
missing=0
for f in $(git ls-files '*_test.go' | xargs grep -ho '^func Fuzz[A-Za-z0-9_]*' | sed 's/^func //' | sort -u); do
	if ! grep -q -- "-fuzz '^$f\\$\\$'" Makefile; then
		echo "fuzz target $f is not listed in the Makefile's fuzz target" >&2
		missing=1
	fi
done
exit $missing
