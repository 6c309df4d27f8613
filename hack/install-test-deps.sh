#!/usr/bin/env bash
# Makes sure the programs the tests start are installed: redis-server, redis-sentinel and
# redis-cli (Debian packages redis-server, redis-sentinel, redis-tools), spin with a C
# compiler for the model (make model), and redis-py with pytest for the Python client and the
# conformance suite (python3-redis, python3-pytest: make conformance). Installs them with apt-get when run as root; otherwise
# says what to install and fails.
set -euo pipefail

missing=()
for bin in redis-server redis-sentinel redis-cli spin gcc; do
	command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
# Debian's python3-redis installs for /usr/bin/python3, which may not be the first python3.
py_ok=false
for py in python3 /usr/bin/python3; do
	if "$py" -c 'import redis, pytest' >/dev/null 2>&1; then py_ok=true; break; fi
done
$py_ok || missing+=("python3 with redis-py and pytest")
[[ ${#missing[@]} -eq 0 ]] && exit 0

packages="redis-server redis-sentinel redis-tools spin gcc python3-redis python3-pytest"
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
	echo "missing ${missing[*]}: install the packages $packages (e.g. sudo apt-get install $packages) and run again" >&2
	exit 1
fi
echo "installing $packages with apt-get (missing: ${missing[*]})" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $packages >/dev/null
# The Debian packages may start system-wide servers on 6379/26379; the tests start their own.
for svc in redis-server redis-sentinel; do
	service "$svc" stop >/dev/null 2>&1 || true
done
