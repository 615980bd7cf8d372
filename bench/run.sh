#!/bin/sh
# run.sh reruns Sluice's core benchmarks and prints the tables of
# docs/bench-core.md: Sluice's memstore against golang.org/x/time/rate,
# ulule/limiter, sethvargo/go-limiter and go-chi/httprate in one run of the
# bench module, then memstore's own benchmarks, each COUNT times; the tables
# hold the medians and the ratios.
#
#   bench/run.sh                 # from anywhere; about 6-10 minutes on 2 cores
#   COUNT=5 bench/run.sh         # more repetitions
#   MEMSTORE=0 bench/run.sh      # skip memstore's own package benchmarks
#
# Raw `go test -bench` output and tables.md go to bench/results/ (OUT=dir).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
count=${COUNT:-3}
out=${OUT:-$here/results}
mkdir -p "$out"
cd "$here"

{
	echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) nproc=$(nproc) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') $(go version)"
	echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"
cat "$out/machine.txt"

# The machine's own parallel ceiling (pure arithmetic), then one key:
# admitted, from two goroutines, denied.
go test -run '^$' -bench '^Benchmark(Calibrate|CalibrateParallel|HotKey|HotKeyParallel|HotKeyDeny)$' \
	-benchtime 500ms -count "$count" -cpu 2 -timeout 60m . | tee "$out/hot.txt"
# 1,000,000 keys held; serial and on 2 cores. Each sub-benchmark fills the
# key space first (outside the timer), then takes 1,000,000 requests.
go test -run '^$' -bench '^BenchmarkKeys1M' \
	-benchtime 1000000x -count "$count" -cpu 2 -timeout 60m . | tee "$out/keys.txt"
# Heap per key after filling 1,000,000 keys: one fill per operation.
go test -run '^$' -bench '^BenchmarkMemory1M$' \
	-benchtime 1x -count "$count" -timeout 60m . | tee "$out/memory.txt"

if [ "${MEMSTORE:-1}" != 0 ]; then
	(cd .. && go test -run '^$' -bench '^Benchmark(HotKey|HotKeyParallel|HotKeyDeny|Keys1M|Keys1MParallel)$' \
		-benchtime 1000000x -count "$count" -cpu 2 -timeout 60m ./memstore/) | tee "$out/memstore.txt"
fi

echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
go run ./benchtable "$out"/hot.txt "$out"/keys.txt "$out"/memory.txt $( [ -f "$out/memstore.txt" ] && [ "${MEMSTORE:-1}" != 0 ] && echo "$out/memstore.txt") | tee "$out/tables.md"
