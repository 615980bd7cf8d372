#!/bin/sh
# ensure-gateways.sh makes sure nginx and caddy are on PATH for the gateway
# tests (internal/gatewaytest), installing Debian's nginx and caddy packages
# when they are not and we are root on a Debian-like system, and failing
# (exit 1) when it cannot. The tests start their own nginx and caddy
# processes on free loopback ports; no system nginx or caddy service is left
# running that was not running before. The logic is scripts/ensure-pkg.sh's.
set -eu
sh "$(dirname "$0")/ensure-pkg.sh" gateways nginx caddy
