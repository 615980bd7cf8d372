#!/bin/sh
# ensure-redis.sh makes sure redis-server and redis-cli (and redis-benchmark)
# are on PATH, installing Debian's redis-server package when they are not and
# we are root on a Debian-like system, and failing (exit 1) when it cannot.
# The tests start their own servers on free loopback ports
# (internal/redistest); no system Redis service is left running that was not
# running before. The logic is scripts/ensure-pkg.sh's.
set -eu
sh "$(dirname "$0")/ensure-pkg.sh" redis redis-server:redis-server,redis-cli:redis
