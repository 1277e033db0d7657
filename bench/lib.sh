# shellcheck shell=bash
# Shared helpers for the sluice benchmark scripts. Source it; do not run it.
#
# Everything a script creates (work directory, loop devices, mounts, FUSE
# daemons, blkio cgroups) is registered here and torn down by the EXIT trap,
# in reverse order, even when the script fails half-way.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
CGROOT=/sys/fs/cgroup/blkio

WORK=""
DAEMON_PIDS=()   # FUSE daemons, parallel to DAEMON_MNTS
DAEMON_MNTS=()
MOUNTS=()        # block file systems we mounted
LOOPS=()         # loop devices we attached
CGROUPS=()       # blkio cgroups we created
CHILD=""         # the benchmark process bg_wait is waiting for
EXTRA_CLEANUP="" # a function of the script's own, run after the daemons stop
SYSFS_FILES=()   # sysfs settings we changed, parallel to SYSFS_OLD
SYSFS_OLD=()

die() { echo "error: $*" >&2; exit 1; }
log() { echo "# $*" >&2; }

# ---------------------------------------------------------------- checks

require_env() {
	[ "$(id -u)" -eq 0 ] || die "must run as root (loop devices, mounts, cgroups, drop_caches)"
	local t
	for t in fio fusermount3 python3 go losetup mkfs.ext4; do
		command -v "$t" >/dev/null 2>&1 || die "'$t' not found in PATH (install it: fio, fuse3, python3, golang, util-linux, e2fsprogs)"
	done
	[ -e /dev/fuse ] || die "/dev/fuse missing (modprobe fuse)"
}

# start_blkio_bench: what a script comparing sluice with the kernel's
# blk-throttle does first: checks, cleanup traps, work directory, sluice.
start_blkio_bench() {
	require_env
	require_blkio
	setup_traps
	make_workdir
	build_sluice
}

# check_limits "L...": each a whole number of MiB/s, or die.
check_limits() {
	local l
	for l in $1; do
		[[ $l =~ ^[1-9][0-9]*$ ]] || die "limits are whole MiB/s values (got '$l')"
	done
}

require_blkio() {
	if ! [ -e "$CGROOT/blkio.throttle.read_bps_device" ]; then
		die "cgroup v1 blkio controller not mounted at $CGROOT (needed for the kernel reference runs)"
	fi
}

# ---------------------------------------------------------------- cleanup

is_mounted() { # path
	awk -v m="$1" '$2 == m { found = 1 } END { exit !found }' /proc/mounts
}

# proc_alive PID: running and not a zombie, from one read of its status.
# A process that exits between two looks (its directory there, then its
# status gone) would otherwise pass for alive: stop_daemon then reported
# daemons that had exited at once as "still running 10 s after SIGTERM".
# PROC_ROOT (default /proc) is for the test, bench/lib_test.sh.
proc_alive() {
	local st
	st=$(grep -m1 '^State:' "${PROC_ROOT:-/proc}/$1/status" 2>/dev/null) || return 1
	[[ $st =~ ^State:[[:space:]]*[^[:space:]ZX] ]]
}

# holders DIR: the processes with a file, directory or mapping open under
# DIR, or their working directory or root there.
holders() {
	local p l out=""
	for p in /proc/[0-9]*; do
		for l in "$p"/cwd "$p"/root "$p"/fd/* "$p"/map_files/*; do
			case $(readlink "$l" 2>/dev/null) in
			"$1" | "$1"/*)
				out+=" ${p#/proc/}:$(cat "$p/comm" 2>/dev/null):${l#"$p"/}"
				break
				;;
			esac
		done
	done
	echo "${out:- none}"
}

# stop_daemon PID MOUNTPOINT [LOGFILE]: SIGTERM, wait up to 10 s for a
# clean exit and unmount. A daemon still running then gets SIGABRT (a Go
# daemon prints every goroutine's stack to its log, kept as
# $BENCH_TMPDIR/stuck.PID.log, default /tmp), then the mount a lazy
# fusermount3 -u and the daemon SIGKILL.
stop_daemon() {
	local pid=$1 mnt=$2 logf=${3:-} i keep
	if proc_alive "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			proc_alive "$pid" || break
			sleep 0.1
		done
	fi
	if proc_alive "$pid"; then
		log "daemon $pid still running 10 s after SIGTERM ($(ps -o stat=,wchan=,cmd= -p "$pid" 2>&1 | cut -c1-80)); what holds $mnt: $(holders "$mnt"); SIGABRT"
		log "  $(tr -d '\0' <"/proc/$pid/comm" 2>&1), $(grep -E '^(State|Tgid|Threads)' "/proc/$pid/status" 2>&1 | tr '\n\t' '  ')"
		for i in /proc/"$pid"/task/*; do
			log "  task ${i##*/} $(grep '^State' "$i/status" 2>/dev/null | tr '\t' ' '): $(tr '\n' ' ' <"$i/stack" 2>/dev/null | cut -c1-300)"
		done
		# SIGABRT, not SIGQUIT: a shell without job control starts
		# background commands with SIGQUIT ignored.
		kill -ABRT "$pid" 2>/dev/null || true
		for ((i = 0; i < 20; i++)); do
			proc_alive "$pid" || break
			sleep 0.1
		done
		if [ -n "$logf" ]; then
			keep=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/stuck.$pid.log
			cp "$logf" "$keep" 2>/dev/null && log "its log, with the stacks: $keep"
		fi
	fi
	if is_mounted "$mnt"; then
		log "$mnt still mounted after the daemon stopped; fusermount3 -u -z"
		fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	fi
	if proc_alive "$pid"; then
		log "daemon $pid ignored SIGABRT; SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

# forget_daemon PID: drop a stopped daemon from the cleanup list.
forget_daemon() {
	local i
	for i in "${!DAEMON_PIDS[@]}"; do
		if [ "${DAEMON_PIDS[$i]}" = "$1" ]; then
			unset 'DAEMON_PIDS[i]' 'DAEMON_MNTS[i]'
		fi
	done
}

cleanup() {
	local rc=$? i
	set +e
	trap - EXIT INT TERM
	if [ -n "$CHILD" ] && proc_alive "$CHILD"; then
		kill -TERM "$CHILD" 2>/dev/null
		wait "$CHILD" 2>/dev/null
	fi
	for i in "${!DAEMON_PIDS[@]}"; do
		stop_daemon "${DAEMON_PIDS[$i]}" "${DAEMON_MNTS[$i]}"
	done
	# A script's own teardown (a server, a network namespace), after the
	# daemons that use it.
	[ -n "${EXTRA_CLEANUP:-}" ] && "$EXTRA_CLEANUP"
	for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
		if is_mounted "${MOUNTS[$i]}"; then
			umount "${MOUNTS[$i]}" 2>/dev/null || umount -l "${MOUNTS[$i]}"
		fi
	done
	# Queue settings of a loop device outlive losetup -d: put them back first.
	for ((i = ${#SYSFS_FILES[@]} - 1; i >= 0; i--)); do
		echo "${SYSFS_OLD[$i]}" >"${SYSFS_FILES[$i]}" 2>/dev/null ||
			echo "warning: could not restore ${SYSFS_FILES[$i]} to ${SYSFS_OLD[$i]}" >&2
	done
	for ((i = ${#LOOPS[@]} - 1; i >= 0; i--)); do
		losetup -d "${LOOPS[$i]}" || echo "warning: losetup -d ${LOOPS[$i]} failed" >&2
	done
	for ((i = ${#CGROUPS[@]} - 1; i >= 0; i--)); do
		[ -d "${CGROUPS[$i]}" ] || continue
		# Move stragglers (there should be none) to the root before removal.
		while read -r p; do echo "$p" >"$CGROOT/cgroup.procs" 2>/dev/null; done <"${CGROUPS[$i]}/cgroup.procs"
		rmdir "${CGROUPS[$i]}" || echo "warning: rmdir ${CGROUPS[$i]} failed" >&2
	done
	if [ -n "$WORK" ] && [ -d "$WORK" ]; then
		if [ "$rc" -ne 0 ] && [ -n "${KEEP_LOGS:-}" ]; then
			rm -f "$WORK/disk.img"
			log "logs kept in $WORK"
		else
			rm -rf "$WORK"
		fi
	fi
	exit "$rc"
}

setup_traps() {
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

make_workdir() {
	WORK=$(mktemp -d "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/sluice-bench.XXXXXX")
}

# bg_wait CMD...: run CMD as a child and wait for it. Bash defers traps
# while a foreground command runs; waiting on a background child lets an
# INT/TERM to this script clean up at once (the cleanup stops the child).
bg_wait() {
	local rc=0
	"$@" &
	CHILD=$!
	wait "$CHILD" || rc=$?
	CHILD=""
	return "$rc"
}

# ---------------------------------------------------------------- build

# go_build OUT PKG: build a package of this module. If the module's go.sum
# lacks entries (e.g. golang.org/x/sys for go-fuse), retry with a private
# copy of go.mod/go.sum so the repository is never modified.
go_build() {
	local out=$1 pkg=$2 modd
	if (cd "$REPO" && go build -o "$out" "$pkg") 2>"$WORK/build.log"; then
		return 0
	fi
	modd=$WORK/gomod
	mkdir -p "$modd"
	cp "$REPO/go.mod" "$modd/go.mod"
	[ -f "$REPO/go.sum" ] && cp "$REPO/go.sum" "$modd/go.sum"
	if (cd "$REPO" && go build -mod=mod -modfile="$modd/go.mod" -o "$out" "$pkg") 2>"$WORK/build.log"; then
		log "built $pkg with a private go.mod copy (the module's go.sum is incomplete)"
		return 0
	fi
	echo "go build $pkg failed:" >&2
	sed 's/^/    /' "$WORK/build.log" >&2
	return 1
}

# build_sluice: sets SLUICE to a freshly built binary, or to "" if the build
# fails (callers then skip the sluice rows). SLUICE_BIN overrides the build.
build_sluice() {
	if [ -n "${SLUICE_BIN:-}" ]; then
		[ -x "$SLUICE_BIN" ] || die "SLUICE_BIN=$SLUICE_BIN is not executable"
		SLUICE=$SLUICE_BIN
		return
	fi
	SLUICE=$WORK/bin/sluice
	mkdir -p "$WORK/bin"
	if ! go_build "$SLUICE" ./cmd/sluice; then
		echo "warning: sluice does not build; its rows are skipped" >&2
		SLUICE=""
	fi
}

build_loopback() {
	LOOPBACK=$WORK/bin/loopback
	mkdir -p "$WORK/bin"
	go_build "$LOOPBACK" ./bench/loopback || die "cannot build the loopback helper"
}

# ---------------------------------------------------------------- devices

# make_loop_dev SIZE_MIB NAME: image file $WORK/NAME.img and a loop device
# on it. Sets LOOP (/dev/loopN), LOOPNAME (loopN), MAJMIN (for blkio).
make_loop_dev() {
	local mib=$1 img=$WORK/$2.img
	fallocate -l "${mib}M" "$img" 2>/dev/null ||
		dd if=/dev/zero of="$img" bs=1M count="$mib" status=none
	LOOP=$(losetup -f --show "$img")
	LOOPS+=("$LOOP")
	LOOPNAME=${LOOP#/dev/}
	# shellcheck disable=SC2034 # used by the scripts that source this file
	MAJMIN=$(tr -d ' \n' <"/sys/block/$LOOPNAME/dev")
}

# make_loop_fs SIZE_MIB MOUNTPOINT: image file in $WORK, loop device, ext4,
# mounted. Sets LOOP, LOOPNAME, MAJMIN as make_loop_dev.
make_loop_fs() {
	local mnt=$2
	make_loop_dev "$1" "$(basename "$mnt")"
	# No lazy init: a background inode-table zeroing thread would add device
	# writes (and contention) during the measurements.
	mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP"
	mkdir -p "$mnt"
	mount "$LOOP" "$mnt"
	MOUNTS+=("$mnt")
}

# set_sysfs FILE VALUE: write a sysfs setting, restored on exit.
set_sysfs() {
	local old
	old=$(cat "$1")
	echo "$2" >"$1" 2>/dev/null || return 1
	SYSFS_FILES+=("$1")
	SYSFS_OLD+=("$old")
}

# write_file PATH SIZE_MIB: lay a file out with O_DIRECT 1 MiB writes.
write_file() {
	bg_wait fio --name=prep --filename="$1" --rw=write --bs=1M --size="${2}M" \
		--direct=1 --ioengine=psync >"$WORK/prep.log" 2>&1 ||
		{ cat "$WORK/prep.log" >&2; die "fio could not write $1"; }
}

# warm_file PATH: one untimed pass over the test file. The first read of
# fresh data is slower below the VM (host-side caching), which would
# penalise whichever path runs first.
warm_file() {
	log "warm-up pass over the test file"
	dd if="$1" of=/dev/null bs=1M status=none
}

drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

# make_cgroup NAME: create a blkio cgroup; sets CG to its path. (Not via
# $(...): the cleanup list must be updated in this shell.)
make_cgroup() {
	CG=$CGROOT/$1
	mkdir "$CG"
	CGROUPS+=("$CG")
}

# in_cgroup CG CMD...: run CMD inside the cgroup (exec, so the cgroup holds
# only CMD and its children).
in_cgroup() {
	local cg=$1
	shift
	# shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner bash
	bg_wait bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"
}

# ---------------------------------------------------------------- Redis

# start_redis: a redis-server on a Unix socket in $WORK with nothing kept
# on disk (a restart forgets every lease), replacing one started before;
# sets REDIS_URL. A script stops it with stop_redis, after its mounts (a
# mount stopping gives its leases back): EXTRA_CLEANUP.
start_redis() {
	local i
	stop_redis
	rm -f "$WORK/redis.sock"
	redis-server --port 0 --unixsocket "$WORK/redis.sock" --unixsocketperm 700 --save "" --appendonly no >"$WORK/redis.log" 2>&1 &
	echo $! >"$WORK/redis.pid"
	REDIS_URL=unix://$WORK/redis.sock
	for ((i = 0; i < 100; i++)); do
		grep -qi "ready to accept" "$WORK/redis.log" && return 0
		sleep 0.05
	done
	die "redis-server did not start: $(cat "$WORK/redis.log")"
}

stop_redis() {
	[ -s "$WORK/redis.pid" ] && kill "$(cat "$WORK/redis.pid")" 2>/dev/null && sleep 0.2
	[ -e "$WORK/redis.pid" ] && : >"$WORK/redis.pid"
	return 0
}

# ---------------------------------------------------------------- FUSE

# wait_mount PID MOUNTPOINT LOGFILE [TIMEOUT_S]
wait_mount() {
	local pid=$1 mnt=$2 logf=$3 t=${4:-15} i
	for ((i = 0; i < t * 10; i++)); do
		is_mounted "$mnt" && return 0
		if ! proc_alive "$pid"; then
			echo "error: the daemon for $mnt exited before mounting; its log:" >&2
			sed 's/^/    /' "$logf" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "error: $mnt not in /proc/mounts after ${t}s; daemon log:" >&2
	sed 's/^/    /' "$logf" >&2
	return 1
}

# try_fuse LOGFILE MOUNTPOINT CMD...: start a FUSE daemon in the background
# and wait for the mount. Sets FUSE_PID. A mount that fails is stopped and
# reported (returns 1).
try_fuse() {
	local logf=$1 mnt=$2
	shift 2
	mkdir -p "$mnt"
	"$@" >"$logf" 2>&1 &
	FUSE_PID=$!
	FUSE_LOG=$logf
	DAEMON_PIDS+=("$FUSE_PID")
	DAEMON_MNTS+=("$mnt")
	wait_mount "$FUSE_PID" "$mnt" "$logf" && return 0
	stop_fuse
	return 1
}

# start_fuse LOGFILE MOUNTPOINT CMD...: try_fuse, ending the run when the
# mount fails.
start_fuse() {
	try_fuse "$@" || die "mount of $2 failed (${*:3})"
}

# stop_fuse: stop the daemon started last by start_fuse.
stop_fuse() {
	local mnt i
	for i in "${!DAEMON_PIDS[@]}"; do
		[ "${DAEMON_PIDS[$i]}" = "$FUSE_PID" ] && mnt=${DAEMON_MNTS[$i]}
	done
	stop_daemon "$FUSE_PID" "$mnt" "${FUSE_LOG:-}"
	forget_daemon "$FUSE_PID"
}

# start_fuseuring LOGFILE MOUNTPOINT ARGS...: start the minimal server
# bench/fuseuring (built as $FUSEURING) and wait for its "ready" line,
# printed once a stat through the mount was answered. Sets FUSE_PID; on
# failure prints its log and returns 1.
start_fuseuring() {
	local logf=$1 mnt=$2 i
	shift 2
	"$FUSEURING" "$@" "$mnt" >"$logf" 2>&1 &
	FUSE_PID=$!
	FUSE_LOG=$logf
	DAEMON_PIDS+=("$FUSE_PID")
	DAEMON_MNTS+=("$mnt")
	for ((i = 0; i < 200; i++)); do
		grep -q '^ready' "$logf" && return 0
		proc_alive "$FUSE_PID" || break
		sleep 0.1
	done
	echo "error: the minimal FUSE server ($*) was not ready; its log:" >&2
	sed 's/^/    /' "$logf" >&2
	return 1
}

# cpu_ticks PID: utime + stime of PID so far, in clock ticks (the fields
# after the command name, which may hold spaces).
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }

# sluice_mount LOGFILE SOURCE MOUNTPOINT [FLAGS...]
sluice_mount() {
	local logf=$1 src=$2 mnt=$3
	shift 3
	start_fuse "$logf" "$mnt" "$SLUICE" mount "$@" "$src" "$mnt"
}

# sluice_stat MOUNTPOINT OUTFILE
sluice_stat() {
	"$SLUICE" stat --json "$1" >"$2" 2>"$2.err" || {
		echo "warning: sluice stat --json $1 failed: $(cat "$2.err")" >&2
		return 1
	}
}

# stat_delta BEFORE AFTER FIELD [GROUP]: after - before for one group counter.
stat_delta() {
	python3 - "$1" "$2" "$3" "${4:-default}" <<'EOF'
import json, sys
def get(path, field, group):
    with open(path) as f:
        d = json.load(f)
    for g in d.get("groups", []):
        if g.get("group") == group:
            return int(g.get(field, 0))
    sys.exit(f"group {group!r} not in {path}")
b, a = get(sys.argv[1], sys.argv[3], sys.argv[4]), get(sys.argv[2], sys.argv[3], sys.argv[4])
print(a - b)
EOF
}

# ---------------------------------------------------------------- fio

# fio_json OUT.json FIO-ARGS...: run fio with JSON output to a file.
fio_json() {
	local out=$1
	shift
	bg_wait fio --output-format=json --output="$out" "$@" 2>"$out.err" || {
		echo "error: fio failed ($*):" >&2
		cat "$out.err" "$out" >&2 2>/dev/null
		return 1
	}
}

# fio_get OUT.json EXPR: evaluate a python expression over the first job,
# with j = jobs[0], r = j["read"], w = j["write"].
fio_get() {
	python3 - "$1" "$2" <<'EOF'
import json, sys
with open(sys.argv[1]) as f:
    text = f.read()
d = json.loads(text[text.index("{"):])   # skip any warning lines before the JSON
j = d["jobs"][0]
r, w = j["read"], j["write"]
v = eval(sys.argv[2])
print(f"{v:.6g}" if isinstance(v, float) else v)
EOF
}

# ---------------------------------------------------------------- output

# print_table TSV: first line is the header; columns joined by " | ",
# the first two left-aligned, numbers right-aligned. Rows with fewer
# fields (e.g. a skipped path) print as they are.
print_table() {
	python3 - "$1" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
n = len(rows[0])
full = [r for r in rows if len(r) == n]
w = [max(len(r[i]) for r in full) for i in range(n)]
def fmt(r):
    if len(r) != n:
        return " | ".join(c.ljust(w[i]) if i < n else c for i, c in enumerate(r))
    return " | ".join(c.ljust(w[i]) if i < 2 else c.rjust(w[i]) for i, c in enumerate(r))
print(fmt(rows[0]))
print("-+-".join("-" * x for x in w))
for r in rows[1:]:
    print(fmt(r))
EOF
}

# rotated R: stdin's lines, starting at line R modulo their count: the
# order of a round's paths, so that no path always runs after the same one.
rotated() {
	local lines i
	mapfile -t lines
	for ((i = 0; i < ${#lines[@]}; i++)); do
		echo "${lines[(i + $1) % ${#lines[@]}]}"
	done
}

# median_table ROWS OUT HEADER BY_TITLE BY: ROWS holds tab-separated rows
# of a round, two key columns and figures ("-" for none); OUT gets HEADER
# (tab-separated, the key columns first) and a row per key, in first-seen
# order, with the median of each figure over the rounds, printed with as
# many decimals as the figures have. With more than one round the headers
# say median, and a last column, BY_TITLE, gives the figures BY names
# (comma-separated indexes among the figures) round by round. A row of
# another length (a path that did not run) is passed through.
median_table() {
	python3 - "$@" <<'EOF'
import statistics, sys
src, dst, header, by_title, by = sys.argv[1:6]
header = header.split("\t")
by = [int(i) for i in by.split(",")]
rows = [l.rstrip("\n").split("\t") for l in open(src) if l.strip()]
order, groups = [], {}
for r in rows:
    k = (r[1], r[2])
    if k not in groups:
        order.append(k)
        groups[k] = []
    groups[k].append(r)
multi = len({r[0] for r in rows}) > 1

def median(vals):
    vals = [v for v in vals if v != "-"]
    if not vals:
        return "-"
    places = max(len(v.partition(".")[2]) for v in vals)
    return f"{statistics.median(float(v) for v in vals):.{places}f}"

with open(dst, "w") as out:
    head = header[:2] + [("median " if multi else "") + h for h in header[2:]] + ([by_title] if multi else [])
    print("\t".join(head), file=out)
    for k in order:
        rs = groups[k]
        if any(len(r) != len(header) + 1 for r in rs):
            print("\t".join(rs[0][1:]), file=out)
            continue
        cells = list(k) + [median(r[i] for r in rs) for i in range(3, len(header) + 1)]
        if multi:
            cells.append("; ".join(", ".join(r[3 + i] for i in by) for r in rs))
        print("\t".join(cells), file=out)
EOF
}
