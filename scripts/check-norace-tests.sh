#!/bin/sh
# Fails when a test that skips itself under the race detector (a Test
# function that reads raceEnabled) is not in the Makefile's NORACE_TESTS,
# or its package not in NORACE_PKGS, which `make unit` runs without -race:
# the rest of `make test` runs under -race, so such a test would never run.
set -eu
cd "$(dirname "$0")/.."
tests=$(sed -n 's/^NORACE_TESTS = //p' Makefile)
pkgs=" $(sed -n 's/^NORACE_PKGS = //p' Makefile) "
missing=0
for t in $(git ls-files '*_test.go' | xargs awk '
	FNR == 1 || /^}/ { name = "" }
	/^func Test[A-Za-z0-9_]*\(/ { name = $2; sub(/\(.*/, "", name) }
	/^[^\/]*raceEnabled/ && name != "" { d = FILENAME; sub(/\/?[^\/]*$/, "", d); print name "@./" d }' | sort -u); do
	f=${t%@*} pkg=${t#*@}
	[ "$pkg" = "./" ] && pkg=.
	case "|$tests|" in
	*"|$f|"*) ;;
	*)
		echo "test $f skips under -race and is not in the Makefile's NORACE_TESTS" >&2
		missing=1
		;;
	esac
	case "$pkgs" in
	*" $pkg "*) ;;
	*)
		echo "test $f skips under -race and its package $pkg is not in the Makefile's NORACE_PKGS" >&2
		missing=1
		;;
	esac
done
exit $missing
