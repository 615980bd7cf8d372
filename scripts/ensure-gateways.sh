#!/bin/sh
# ensure-gateways.sh makes sure nginx and caddy are on PATH for the gateway
# tests (internal/gatewaytest), installing Debian's nginx and caddy
# packages when they are not and we are root on a Debian-like system. The
# tests start their own nginx and caddy processes on free loopback ports;
# this script never leaves a system nginx or caddy service running that it
# did not find running.
set -eu

have() { command -v "$1" >/dev/null 2>&1; }

missing=
have nginx || missing="$missing nginx"
have caddy || missing="$missing caddy"
if [ -z "$missing" ]; then
	exit 0
fi

if [ "$(id -u)" != 0 ] || ! have apt-get; then
	echo "ensure-gateways:$missing not found, and cannot install here (need root and apt-get)." >&2
	echo "ensure-gateways: install them (Debian/Ubuntu: sudo apt-get install -y$missing; macOS: brew install$missing) and rerun." >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive

# Keep the packages' post-install from starting system services: a
# policy-rc.d that answers 101 forbids service starts. Install a temporary
# one only if the system has none, and remove it afterwards.
policy=/usr/sbin/policy-rc.d
added_policy=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	added_policy=1
fi
cleanup() { if [ -n "$added_policy" ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

running=
for svc in $missing; do
	if have systemctl && systemctl is-active --quiet "$svc" 2>/dev/null; then
		running="$running $svc"
	fi
done

echo "ensure-gateways: installing$missing with apt-get" >&2
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq $missing >/dev/null

# Should a service have started anyway (systemd without policy-rc.d
# support), stop it: it was not running before we installed it.
for svc in $missing; do
	case " $running " in *" $svc "*) continue ;; esac
	if have systemctl && systemctl is-active --quiet "$svc" 2>/dev/null; then
		systemctl stop "$svc" || true
		systemctl disable "$svc" >/dev/null 2>&1 || true
	fi
done

for bin in $missing; do
	if ! have "$bin"; then
		echo "ensure-gateways: apt-get install $bin did not provide $bin" >&2
		exit 1
	fi
done
nginx -v
caddy version >&2
