#!/bin/sh
# Regenerates the example plots from the example traces. Run from anywhere;
# cmd/sluice's TestSimulateExamples checks that the committed files match.
set -eu
cd "$(dirname "$0")/.."
sim() { go run ./cmd/sluice simulate "$@" >/dev/null 2>&1; }
sim -algorithm token_bucket -rate 5/s -burst 10 -trace examples/burst.csv -plot examples/burst.svg
sim -algorithm leaky_bucket -rate 5/s -burst 10 -trace examples/burst.csv -plot examples/burst-leaky.svg
sim -algorithm sliding_window_counter -rate 5/s -trace examples/burst.csv -plot examples/burst-sliding.svg
sim -algorithm fixed_window -rate 10/m -trace examples/boundary.csv -plot examples/boundary-fixed.svg
sim -algorithm sliding_window_log -rate 10/m -trace examples/boundary.csv -plot examples/boundary-log.svg
