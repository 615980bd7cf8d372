#!/bin/sh
# ensure-pkg.sh makes sure commands are on PATH, installing the Debian
# packages that provide them when they are not and we are root on a
# Debian-like system; it fails loudly (exit 1) when it cannot. It is the one
# copy of that logic behind ensure-redis.sh and ensure-gateways.sh. The tests
# start their own servers on free loopback ports; this script never leaves a
# system service running that it did not find running.
#
#	sh scripts/ensure-pkg.sh NAME PKG[:CMD,CMD...[:BREW]] ...
#
# NAME prefixes the messages (ensure-NAME:); each PKG is a Debian package,
# installed when any of its CMDs (default: PKG) is missing, whose service of
# the same name must not be left running; BREW (default: PKG) is the
# Homebrew name given in the hint when installing here is impossible.
set -eu

if [ $# -lt 2 ]; then
	echo "usage: ensure-pkg.sh NAME PKG[:CMD,CMD...[:BREW]] ..." >&2
	exit 2
fi
name=$1
shift

have() { command -v "$1" >/dev/null 2>&1; }

# pkg_of, cmds_of, brew_of split one PKG[:CMD,CMD...[:BREW]] argument.
pkg_of() { printf '%s\n' "${1%%:*}"; }
cmds_of() {
	rest=${1#*:}
	[ "$rest" = "$1" ] && rest=
	rest=${rest%%:*}
	if [ -z "$rest" ]; then pkg_of "$1"; else printf '%s\n' "$rest" | tr , ' '; fi
}
brew_of() {
	case "$1" in
	*:*:*) printf '%s\n' "${1##*:}" ;;
	*) pkg_of "$1" ;;
	esac
}

missing= missing_cmds= brew= all_cmds=
for spec in "$@"; do
	pkg=$(pkg_of "$spec")
	need=
	for cmd in $(cmds_of "$spec"); do
		all_cmds="$all_cmds $cmd"
		have "$cmd" || need="$need $cmd"
	done
	if [ -n "$need" ]; then
		missing="$missing $pkg"
		missing_cmds="$missing_cmds$need"
		brew="$brew $(brew_of "$spec")"
	fi
done
if [ -z "$missing" ]; then
	exit 0
fi

if [ "$(id -u)" != 0 ] || ! have apt-get; then
	echo "ensure-$name:$missing_cmds not found, and cannot install them here (need root and apt-get)." >&2
	echo "ensure-$name: install them (Debian/Ubuntu: sudo apt-get install -y$missing; macOS: brew install$brew) and rerun." >&2
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

# Another apt-get or dpkg run (an unattended upgrade, another checkout's
# harness) may hold dpkg's lock: wait for it up to five minutes rather
# than fail at once.
lock="-o DPkg::Lock::Timeout=300"
echo "ensure-$name: installing$missing with apt-get" >&2
# shellcheck disable=SC2086
apt-get $lock update -qq
# shellcheck disable=SC2086
apt-get $lock install -y -qq $missing >/dev/null

# Should a service have started anyway (systemd without policy-rc.d
# support), stop it: it was not running before we installed it.
for svc in $missing; do
	case " $running " in *" $svc "*) continue ;; esac
	if have systemctl && systemctl is-active --quiet "$svc" 2>/dev/null; then
		systemctl stop "$svc" || true
		systemctl disable "$svc" >/dev/null 2>&1 || true
	fi
done

for cmd in $all_cmds; do
	if ! have "$cmd"; then
		echo "ensure-$name: apt-get install$missing did not provide $cmd" >&2
		exit 1
	fi
done
echo "ensure-$name: installed$missing" >&2
