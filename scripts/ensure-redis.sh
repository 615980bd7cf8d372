#!/bin/sh
# ensure-redis.sh makes sure redis-server and redis-cli (and redis-benchmark)
# are on PATH, installing Debian's redis-server package when they are not and
# we are root on a Debian-like system. The tests start their own servers on
# free loopback ports (internal/redistest); this script never leaves a system
# Redis service running that it did not find running.
set -eu

have() { command -v "$1" >/dev/null 2>&1; }

if have redis-server && have redis-cli; then
	exit 0
fi

if [ "$(id -u)" != 0 ] || ! have apt-get; then
	echo "ensure-redis: redis-server/redis-cli not found, and cannot install them here (need root and apt-get)." >&2
	echo "ensure-redis: install Redis (Debian/Ubuntu: sudo apt-get install -y redis-server; macOS: brew install redis) and rerun." >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive

# Keep the package's post-install from starting a system redis-server: a
# policy-rc.d that answers 101 forbids service starts. Install a temporary one
# only if the system has none, and remove it afterwards.
policy=/usr/sbin/policy-rc.d
added_policy=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	added_policy=1
fi
cleanup() { if [ -n "$added_policy" ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

was_running=
if have systemctl && systemctl is-active --quiet redis-server 2>/dev/null; then
	was_running=1
fi

echo "ensure-redis: installing redis-server with apt-get" >&2
apt-get update -qq
apt-get install -y -qq redis-server >/dev/null

# Should a service have started anyway (systemd without policy-rc.d support),
# stop it: it was not running before we installed it.
if [ -z "$was_running" ] && have systemctl && systemctl is-active --quiet redis-server 2>/dev/null; then
	systemctl stop redis-server || true
	systemctl disable redis-server >/dev/null 2>&1 || true
fi

if ! have redis-server || ! have redis-cli; then
	echo "ensure-redis: apt-get install redis-server did not provide redis-server and redis-cli" >&2
	exit 1
fi
redis-server --version >&2
