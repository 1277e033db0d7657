#!/usr/bin/env bash
# sluice beside its peers: the native file system, go-fuse's loopback,
# mergerfs and rclone mount, on the same files of one loop ext4, in one run,
# for random and sequential reads, sequential writes and metadata.
#
# usage: peers.sh [runtime_s=8] [rounds=3] [files=20000]
#   env PEERS_FILE_MIB (default 512): size of the test file; the write
#       workloads write a quarter of it
#   env PEERS_PATHS (default all below): the paths to run
#   env PEERS_NO_INSTALL=1: do not try `apt-get install` for a missing
#       mergerfs or rclone (the path is skipped)
#
# Paths (all over the same directory of one loop ext4; everything runs as
# root, so every sluice case is the default group):
#   native          the directory itself
#   loopback        bench/loopback -no-passthrough -timeout 1s: go-fuse's
#                   loopback with sluice's 1 s entry and attribute timeouts
#   mergerfs        one branch, the options its manual recommends:
#                   allow_other,use_ino,cache.files=partial,
#                   dropcacheonclose=true,category.create=mfs; and
#                   minfreespace=0 (the default 4G refuses creates on a
#                   smaller file system)
#   rclone          rclone mount of the directory as a local remote,
#                   --vfs-cache-mode writes, its cache on the same ext4
#   sluice          sluice mount, no limit (its opens by passthrough)
#   sluice-limited  --limit 'default rbps=100GiB wbps=100GiB': a limit the
#                   group never reaches (--cache-mode auto: kernel)
#   sluice-nopt     sluice mount --passthrough=false, no limit
# Workloads, one mount per path and round, caches dropped before each (fio
# with --fadvise_hint=0, see overhead.sh; random reads time based on the
# test file, sequential reads one pass over it and writes one pass over a
# new file of a quarter of its size, both capped at the runtime):
#   rr4k     4 KiB random reads, direct, psync (QD1)            -> IOPS
#   rr4k16   4 KiB random reads, direct, libaio QD16            -> IOPS
#   r4k      4 KiB sequential buffered reads, cold              -> MiB/s
#   r4khot   the same after a read of the file through the path
#            (cat), fio --invalidate=0                          -> MiB/s
#   r1m r1mhot  the same with 1 MiB reads                       -> MiB/s
#   w4k w1m  4 KiB and 1 MiB sequential buffered writes of a new
#            file, --fallocate=none, no fsync                   -> MiB/s
#   create stat readdir unlink  of `files` empty files in 20 directories,
#            2 threads (bench/metaops; readdir: every directory listed once,
#            entries/s)                                         -> ops/s
# The daemon's CPU time (utime + stime, /proc) over each run is divided by
# the run's operations (fio's I/Os, files).
# Rounds run the paths in an order rotated by one each round. The table
# shows medians, and each path's ratios to mergerfs and to native taken
# within each round (median of the rounds' ratios); the targets under it
# are checked on those ratios and print PASS or FAIL (the exit code does
# not depend on them).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

usage="usage: peers.sh [runtime_s=8] [rounds=3] [files=20000]"
RT=${1:-8}
ROUNDS=${2:-3}
FILES=${3:-20000}
DIRS=20
THREADS=2
FILE_MIB=${PEERS_FILE_MIB:-512}
ALL_PATHS="native loopback mergerfs rclone sluice sluice-limited sluice-nopt"
PATHS=${PEERS_PATHS:-$ALL_PATHS}
[[ $RT =~ ^[1-9][0-9]*$ ]] || die "runtime_s must be a positive integer (got '$RT'); $usage"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "rounds must be a positive integer (got '$ROUNDS'); $usage"
[[ $FILES =~ ^[1-9][0-9]*$ ]] || die "files must be a positive integer (got '$FILES'); $usage"
((FILES % DIRS == 0)) || die "files ($FILES) must be a multiple of $DIRS (the directories they are spread over)"
[[ $FILE_MIB =~ ^[1-9][0-9]*$ ]] || die "PEERS_FILE_MIB must be a positive integer"
for p in $PATHS; do
	[[ " $ALL_PATHS " == *" $p "* ]] || die "unknown path '$p' in PEERS_PATHS (want some of: $ALL_PATHS)"
done
DATA_CASES="rr4k rr4k16 r4k r4khot r1m r1mhot w4k w1m"
META_CASES="create stat readdir unlink"

require_env

# want_tool CMD PACKAGE: CMD is there, or apt-get installs PACKAGE, or the
# path is skipped with a note (returns 1).
want_tool() {
	command -v "$1" >/dev/null 2>&1 && return 0
	if [ -z "${PEERS_NO_INSTALL:-}" ] && command -v apt-get >/dev/null 2>&1; then
		log "$1 not found; apt-get install -y $2"
		DEBIAN_FRONTEND=noninteractive apt-get install -y "$2" >"${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/peers-apt.log" 2>&1 ||
			{ apt-get update >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y "$2" \
				>"${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/peers-apt.log" 2>&1; } || true
		rm -f "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/peers-apt.log"
	fi
	command -v "$1" >/dev/null 2>&1 && return 0
	echo "note: $1 (Debian package $2) is missing and could not be installed: the $1 path is skipped" >&2
	return 1
}

SKIPPED=()
run_paths=()
for p in $PATHS; do
	case $p in
	mergerfs) want_tool mergerfs mergerfs || { SKIPPED+=("mergerfs: not installed"); continue; } ;;
	rclone) want_tool rclone rclone || { SKIPPED+=("rclone: not installed"); continue; } ;;
	esac
	run_paths+=("$p")
done

setup_traps
make_workdir
build_loopback
METAOPS=$WORK/bin/metaops
go_build "$METAOPS" ./bench/metaops || die "cannot build the metaops helper"
build_sluice
if [ -z "$SLUICE" ]; then
	SKIPPED+=("sluice paths: sluice does not build")
	mapfile -t run_paths < <(printf '%s\n' "${run_paths[@]}" | grep -v '^sluice')
elif [[ " ${run_paths[*]} " == *" sluice-nopt "* ]] && [[ $("$SLUICE" help mount 2>&1 || true) != *-passthrough* ]]; then
	SKIPPED+=("sluice-nopt: this sluice has no --passthrough")
	mapfile -t run_paths < <(printf '%s\n' "${run_paths[@]}" | grep -v '^sluice-nopt$')
fi
((${#run_paths[@]})) || die "no path left to run"

# The test file, a written file of the same size, the rclone cache (up to
# the written file again) and FILES inodes (ext4: one per 16 KiB).
IMG_MIB=$((FILE_MIB * 3 + FILES * 32 / 1024 + 512))
log "loop ext4 of ${IMG_MIB} MiB, test file ${FILE_MIB} MiB, runtime ${RT}s, $ROUNDS round(s), $FILES files; paths: ${run_paths[*]}"
make_loop_fs "$IMG_MIB" "$WORK/fs"
DATA=$WORK/fs/data
mkdir -p "$DATA"
write_file "$DATA/f" "$FILE_MIB"
warm_file "$DATA/f"
MNT=$WORK/mnt
RCACHE=$WORK/fs/rclone-cache

cat >"$WORK/readdir.py" <<'EOF'
# readdir.py DIR DIRS THREADS: list DIR/d000.. once, each worker its share
# of the directories (as metaops); one JSON line like metaops's.
import json, os, sys, threading, time
top, dirs, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
counts, errors = [0] * threads, []
def work(k):
    try:
        for d in range(k, dirs, threads):
            with os.scandir(os.path.join(top, f"d{d:03d}")) as it:
                for _ in it:
                    counts[k] += 1
    except OSError as e:
        errors.append(e)
ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
t0 = time.monotonic()
for t in ts:
    t.start()
for t in ts:
    t.join()
secs = time.monotonic() - t0
if errors:
    sys.exit(f"readdir: {errors[0]}")
n = sum(counts)
print(json.dumps({"phase": "readdir", "ops": n, "seconds": secs, "ops_per_s": n / secs}))
EOF

ROWS=$WORK/rows
: >"$ROWS"

# fio_args CASE: a data workload's fio arguments, without the file.
fio_args() {
	local a=(--direct=0 --ioengine=psync --numjobs=1 --runtime="$RT" --fadvise_hint=0 --size="${FILE_MIB}M")
	case $1 in
	rr4k) a+=(--rw=randread --bs=4k --direct=1 --time_based) ;;
	rr4k16) a+=(--rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=16 --time_based) ;;
	r4k) a+=(--rw=read --bs=4k) ;;
	r4khot) a+=(--rw=read --bs=4k --invalidate=0) ;;
	r1m) a+=(--rw=read --bs=1M) ;;
	r1mhot) a+=(--rw=read --bs=1M --invalidate=0) ;;
	w4k) a+=(--rw=write --bs=4k --fallocate=none --size="$((FILE_MIB / 4))M") ;;
	w1m) a+=(--rw=write --bs=1M --fallocate=none --size="$((FILE_MIB / 4))M") ;;
	esac
	echo "${a[@]}"
}

# record CASE PATH OUT.json|- PID TICKS: one row (round, case, path,
# figure, operations, daemon CPU ticks) from fio's or metaops's output;
# OUT "-" records a failure.
record() {
	python3 - "$ROUND" "$@" >>"$ROWS" <<'EOF'
import json, sys
rnd, case, path, out, pid, ticks = sys.argv[1:7]
if out == "-":
    print(f"{rnd}\t{case}\t{path}\tFAIL")
    sys.exit()
text = open(out).read()
d = json.loads(text[text.index("{"):])
if "jobs" in d:
    job = d["jobs"][0]
    r = job["write"] if case.startswith("w") else job["read"]
    secs = r["runtime"] / 1000
    ops = r["total_ios"]
    fig = (ops if case.startswith("rr") else r["io_bytes"] / 2**20) / secs if secs else 0.0
else:
    ops, fig = d["ops"], d["ops_per_s"]
print(f"{rnd}\t{case}\t{path}\t{fig:.1f}\t{ops}\t{ticks if pid != '-' else '-'}")
EOF
}

# run_case CASE PATH DIR PID|-: one workload through DIR.
run_case() {
	local cs=$1 path=$2 dir=$3 pid=$4 out=$WORK/run.json t0=0 t1=0 ok=1
	log "$(date +%T) round $ROUND/$ROUNDS, $path: $cs"
	drop_caches
	case $cs in
	r*hot) bg_wait timeout $((RT * 4 + 60)) cat "$dir/f" >/dev/null || ok="" ;;
	stat | readdir | unlink) [ -e "$WORK/meta.failed" ] && ok="" ;;
	esac
	if [ -z "$ok" ]; then
		echo "warning: $path, $cs: skipped (its preparation failed)" >&2
		record "$cs" "$path" - - -
		return
	fi
	[ "$pid" = - ] || t0=$(cpu_ticks "$pid" 2>/dev/null || echo 0)
	case $cs in
	create | stat | unlink)
		bg_wait timeout -k 10 600 "$METAOPS" -dir "$dir/tree" -files "$FILES" -dirs "$DIRS" -threads "$THREADS" \
			-phases "$cs" >"$out" 2>"$out.err" || ok=""
		;;
	readdir)
		bg_wait timeout -k 10 600 python3 "$WORK/readdir.py" "$dir/tree" "$DIRS" "$THREADS" >"$out" 2>"$out.err" || ok=""
		;;
	*)
		# shellcheck disable=SC2046 # word splitting of fio_args is intended
		bg_wait timeout -k 10 $((RT + 120)) fio --output-format=json --name="$cs" --filename="$dir/$([[ $cs == w* ]] && echo w || echo f)" \
			$(fio_args "$cs") >"$out" 2>"$out.err" || ok=""
		;;
	esac
	[ "$pid" = - ] || t1=$(cpu_ticks "$pid" 2>/dev/null || echo "$t0")
	if [ -z "$ok" ]; then
		echo "warning: $path, $cs failed: $(tail -n 3 "$out.err" | tr '\n' ' ')" >&2
		record "$cs" "$path" - - -
		[[ $cs == create ]] && touch "$WORK/meta.failed"
	else
		record "$cs" "$path" "$out" "$pid" $((t1 - t0))
	fi
	if [[ $cs == w* ]]; then rm -f "$dir/w" || true; fi
}

# mount_path PATH: mount PATH on $MNT (nothing for native); sets DIR and
# PID (the daemon, - for none). Returns 1 if the mount failed.
mount_path() {
	DIR=$MNT
	PID=-
	case $1 in
	native)
		DIR=$DATA
		return 0
		;;
	loopback) try_fuse "$WORK/$1.log" "$MNT" "$LOOPBACK" -no-passthrough -timeout 1s "$DATA" "$MNT" ;;
	mergerfs)
		try_fuse "$WORK/$1.log" "$MNT" mergerfs -f \
			-o allow_other,use_ino,cache.files=partial,dropcacheonclose=true,category.create=mfs,minfreespace=0,fsname=peers-mergerfs \
			"$DATA" "$MNT"
		;;
	rclone)
		mkdir -p "$RCACHE"
		try_fuse "$WORK/$1.log" "$MNT" rclone mount "$DATA" "$MNT" --vfs-cache-mode writes \
			--cache-dir "$RCACHE" --config /dev/null
		;;
	sluice) try_fuse "$WORK/$1.log" "$MNT" "$SLUICE" mount "$DATA" "$MNT" ;;
	sluice-limited) try_fuse "$WORK/$1.log" "$MNT" "$SLUICE" mount --limit 'default rbps=100GiB wbps=100GiB' "$DATA" "$MNT" ;;
	sluice-nopt) try_fuse "$WORK/$1.log" "$MNT" "$SLUICE" mount --passthrough=false "$DATA" "$MNT" ;;
	esac || return 1
	PID=$FUSE_PID
}

for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
	mapfile -t order < <(printf '%s\n' "${run_paths[@]}" | rotated $((ROUND - 1)))
	for p in "${order[@]}"; do
		if ! mount_path "$p"; then
			echo "warning: mounting $p failed: its workloads are skipped in round $ROUND" >&2
			for cs in $DATA_CASES $META_CASES; do record "$cs" "$p" - - -; done
			continue
		fi
		rm -f "$WORK/meta.failed"
		for cs in $DATA_CASES $META_CASES; do
			run_case "$cs" "$p" "$DIR" "$PID"
		done
		rm -rf "$DIR/tree" "$DIR/w" 2>/dev/null || true
		if [ "$p" != native ]; then stop_fuse; fi
		rm -rf "$DATA/tree" "$RCACHE"
	done
done

echo
echo "sluice and its peers: one loop ext4, test file ${FILE_MIB} MiB, ${RT}s per run, caches dropped before each"
echo "run, $FILES files in $DIRS directories with $THREADS threads; $ROUNDS round(s), paths rotated each round"
for s in "${SKIPPED[@]}"; do echo "skipped: $s"; done
PYTHONPATH="$(dirname "$0")" python3 - "$ROWS" "$ROUNDS" "$DATA_CASES $META_CASES" "${run_paths[*]}" <<'EOF'
import os, statistics, sys

from table import table

rows_file, rounds, cases, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
tck = os.sysconf("SC_CLK_TCK")
unit = {c: "IOPS" if c.startswith("rr") else "MiB/s" if c[0] in "rw" and c != "readdir" else "ops/s" for c in cases}
name = {"rr4k": "4k rand QD1", "rr4k16": "4k rand QD16", "r4k": "4k seq cold", "r4khot": "4k seq hot",
        "r1m": "1M seq cold", "r1mhot": "1M seq hot", "w4k": "4k seq write", "w1m": "1M seq write",
        "create": "create", "stat": "stat", "readdir": "readdir", "unlink": "unlink"}

fig, cpu, failed = {}, {}, set()
for l in open(rows_file):
    r = l.rstrip("\n").split("\t")
    rnd, c, p = int(r[0]), r[1], r[2]
    if r[3] == "FAIL":
        failed.add((c, p))
        continue
    fig[c, p, rnd] = float(r[3])
    ops, ticks = int(r[4]), r[5]
    if ticks != "-" and ops:
        cpu[c, p, rnd] = int(ticks) / tck / ops * 1e6

def med(d, c, p):
    vs = [d[c, p, k] for k in range(1, rounds + 1) if (c, p, k) in d]
    return statistics.median(vs) if vs else None

def ratios(c, num, den):
    return [fig[c, num, k] / fig[c, den, k] for k in range(1, rounds + 1)
            if (c, num, k) in fig and (c, den, k) in fig and fig[c, den, k]]

def ratio(c, num, den):
    vs = ratios(c, num, den)
    return statistics.median(vs) if vs else None

def f(v, places=0):
    return "-" if v is None else f"{v:.{places}f}"

multi = rounds > 1
head = ["workload", "path", "unit", "median" if multi else "value"] + (["min-max"] if multi else []) + \
       ["daemon CPU us/op", "/ mergerfs", "/ native"] + (["/ mergerfs by round"] if multi else [])
rows = [head]
for c in cases:
    first = True
    for p in paths:
        v = med(fig, c, p)
        if v is None and (c, p) not in failed:
            continue
        vs = [fig[c, p, k] for k in range(1, rounds + 1) if (c, p, k) in fig]
        cell = f(v, 1 if v is not None and v < 100 else 0)
        if (c, p) in failed:
            cell = "FAIL" if v is None else cell + " (FAIL)"
        row = [name[c] if first else "", p, unit[c], cell]
        if multi:
            row.append(f"{min(vs):.0f}-{max(vs):.0f}" if vs else "-")
        c_us = med(cpu, c, p)
        row.append(f(c_us, 1 if c_us is not None and c_us < 100 else 0))
        row.append(f(ratio(c, p, "mergerfs"), 2) if p != "mergerfs" else "")
        row.append(f(ratio(c, p, "native"), 2) if p != "native" else "")
        if multi:
            row.append(", ".join(f"{x:.2f}" for x in ratios(c, p, "mergerfs")) if p.startswith("sluice") else "")
        rows.append(row)
        first = False
table(rows)

# Targets, each on the median of its per-round ratio.
data = [c for c in cases if c[0] in "rw" and c != "readdir"]
targets = []
for p in ("sluice", "sluice-nopt"):
    targets.append((f"{p} >= 1.0 x mergerfs", p, "mergerfs", 1.0, cases))
targets.append(("sluice-limited >= 0.9 x sluice", "sluice-limited", "sluice", 0.9, cases))
targets.append(("sluice >= 0.9 x native (reads, writes)", "sluice", "native", 0.9, data))
print()
print("targets (median of the per-round ratios)")
cols = [t for t in targets if t[1] in paths and t[2] in paths]
rows = [["workload"] + [t[0] for t in cols]] if cols else []
verdicts = {t[0]: [] for t in cols}
for c in cases:
    row = [name[c]]
    for t in cols:
        if c not in t[4]:
            row.append("")
            continue
        r = ratio(c, t[1], t[2])
        if r is None:
            v = "FAIL"
            row.append("- FAIL")
        else:
            v = "PASS" if r >= t[3] else "FAIL"
            row.append(f"{r:.2f} {v}")
        verdicts[t[0]].append((c, v))
    rows.append(row)
if cols:
    table(rows)
else:
    print("(no target: its paths did not run)")
print()
for t in cols:
    bad = [name[c] for c, v in verdicts[t[0]] if v != "PASS"]
    n = len(verdicts[t[0]])
    print(f"{'PASS' if not bad else 'FAIL'}: {t[0]} ({n - len(bad)}/{n} workloads" +
          (f"; not met: {', '.join(bad)})" if bad else ")"))
for t in targets:
    if t not in cols:
        print(f"-: {t[0]} (not run: {t[1] if t[1] not in paths else t[2]} skipped)")
EOF
cat <<'EOF'

mergerfs runs with cache.files=partial,dropcacheonclose=true (its manual's
setup): its page cache is cleared on open and the branch file's dropped on
close, so its "hot" reads start cold. rclone writes go to its cache
(--vfs-cache-mode writes, on the same ext4) and reach the directory later.
sluice passes the opens of unlimited groups through (the kernel reads and
writes the file itself); sluice-nopt serves them with --passthrough=false.
EOF
