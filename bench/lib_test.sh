#!/usr/bin/env bash
# Tests of lib.sh's helpers that need no root, mount or device:
#   bash bench/lib_test.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

fails=0
check() { # want(0|1) what PID
	local want=$1 what=$2 got=0
	proc_alive "$3" || got=1
	if [ "$got" != "$want" ]; then
		echo "FAIL: proc_alive, $what: returned $got, want $want" >&2
		fails=$((fails + 1))
	fi
}

# Real processes: this shell, a child that exited and was reaped, and a
# zombie (a child of a subshell that does not reap it while it sleeps).
check 0 "this shell" $$
sleep 0 &
gone=$!
wait "$gone"
check 1 "an exited and reaped child" "$gone"

# A fake proc root for the states a live /proc shows only for an instant.
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir "$root/100" "$root/101" "$root/102" "$root/103"
printf 'Name:\tsluice\nState:\tS (sleeping)\n' >"$root/100/status"
printf 'Name:\tsluice\nState:\tZ (zombie)\n' >"$root/101/status"
printf 'Name:\tsluice\nState:\tX (dead)\n' >"$root/102/status"
# 103: the directory still there, its status gone: the process exited
# between the two (what stop_daemon took for a daemon still running).
PROC_ROOT=$root check 0 "sleeping" 100
PROC_ROOT=$root check 1 "zombie" 101
PROC_ROOT=$root check 1 "dead" 102
PROC_ROOT=$root check 1 "directory without a status" 103
PROC_ROOT=$root check 1 "no directory" 104

if ((fails)); then
	echo "lib_test.sh: $fails failure(s)" >&2
	exit 1
fi
echo "lib_test.sh: ok"
