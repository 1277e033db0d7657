#!/usr/bin/env bash
# What a limit costs below it, how precise it is at high rates, and
# sluice's CPU time per read or write, in one run against the native file
# system, a plain go-fuse loopback and the kernel's blk-throttle.
#
# usage: speed.sh [runtime_s=8] [limits_mib="50 100 200"] [rounds=1]
#   env SPEED_CASES (default "r4k r64k r1m r1mhot rr4k rr4k4 w4k w1m"): the
#     workloads below the limits to run
# With more than one round, each round runs every workload and limit
# again with the order of its paths rotated by one, and the table gives
# each figure's median, then the ratios the targets are about, round by
# round: on this kind of VM the order of two runs moves a sequential
# read by more than the difference between paths.
#
# One loop ext4, one file, caches dropped before each run, fio as uid 1001,
# --fadvise_hint=0 (FUSE does not forward fadvise; see overhead.sh).
#
# Below a limit, each workload on four paths:
#   native            the directory itself
#   loopback          bench/loopback -no-passthrough -allow-other: plain go-fuse, every
#                     read that misses the kernel page cache reaches it
#   sluice unlimited  the uid's group has no limit
#   sluice unreached  the group has a limit it never reaches (reads:
#                     riops=10000000, writes: wbps=10GiB), --cache-mode auto
# and, for r4k, the unreached limit served with --cache-mode direct; for
# w4k and w1m, both groups again with --write-cache, and the unreached
# limit with --write-cache --cache-mode kernel (its writes cached, the
# writeback paced).
# Workloads:
#   r4k r64k r1m   sequential buffered reads of 4 KiB, 64 KiB, 1 MiB
#   r1mhot         the same 1 MiB reads of a file read once just before
#                  through the same path (cat, as the same uid), so it is in
#                  the page cache; fio with --invalidate=0 keeps it there
#   rr4k rr4k4     4 KiB random reads, direct=1, QD1, 1 and 4 jobs
#   w4k w1m        sequential buffered writes of 4 KiB and 1 MiB to a new
#                  1 GiB file (time based: it wraps round)
# At each limit: 4 KiB buffered sequential reads under blk-throttle
# (cgroup v1 read_bps_device on the loop device) and through sluice with
# --cache-mode direct and kernel.
# Reported: MiB/s, achieved/limit, clat max, and sluice's CPU time (utime +
# stime of the daemon, /proc) per read() or write() call.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-8}
LIMITS=${2:-"50 100 200"}
ROUNDS=${3:-1}
CASES=${SPEED_CASES:-"r4k r64k r1m r1mhot rr4k rr4k4 w4k w1m"}
[[ $RT =~ ^[1-9][0-9]*$ ]] || die "runtime_s must be a positive integer (got '$RT'); usage: speed.sh [runtime_s] [limits_mib] [rounds]"
check_limits "$LIMITS"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "rounds must be a positive integer (got '$ROUNDS'); usage: speed.sh [runtime_s] [limits_mib] [rounds]"
for c in $CASES; do
	case $c in r4k | r64k | r1m | r1mhot | rr4k | rr4k4 | w4k | w1m) ;;
	*) die "unknown case '$c' in SPEED_CASES (want r4k r64k r1m r1mhot rr4k rr4k4 w4k w1m)" ;;
	esac
done

start_blkio_bench
build_loopback

FILE_MIB=4096
IMG_MIB=$((FILE_MIB + 1536))
log "loop ext4 of ${IMG_MIB} MiB, test file ${FILE_MIB} MiB, runtime ${RT}s, limits: $LIMITS MiB/s, $ROUNDS round(s)"
make_loop_fs "$IMG_MIB" "$WORK/fs"
DATA=$WORK/fs/data
mkdir -p "$DATA"
write_file "$DATA/f" "$FILE_MIB"
chown 1001:1001 "$DATA"
chmod 755 "$WORK" "$WORK/fs" "$DATA"
chmod 644 "$DATA/f"
make_cgroup "sluice-bench-speed.$$"
warm_file "$DATA/f"

AS_USER=(setpriv --reuid=1001 --regid=1001 --clear-groups)

ROWS=$WORK/rows
: >"$ROWS"

# fio_args CASE: the fio arguments of a workload, without the file.
fio_args() {
	local a=(--rw=read --direct=0 --numjobs=1 --ioengine=psync --runtime="$RT" --time_based
		--fadvise_hint=0 --group_reporting)
	case $1 in
	r4k) a+=(--bs=4k --size="${FILE_MIB}M") ;;
	r64k) a+=(--bs=64k --size="${FILE_MIB}M") ;;
	r1m) a+=(--bs=1M --size="${FILE_MIB}M") ;;
	r1mhot) a+=(--bs=1M --size="${FILE_MIB}M" --invalidate=0) ;;
	rr4k) a+=(--rw=randread --direct=1 --bs=4k --size="${FILE_MIB}M") ;;
	rr4k4) a+=(--rw=randread --direct=1 --bs=4k --numjobs=4 --size="${FILE_MIB}M") ;;
	w4k) a+=(--rw=write --bs=4k --size=1G) ;;
	w1m) a+=(--rw=write --bs=1M --size=1G) ;;
	limit) a+=(--bs=4k --size="${FILE_MIB}M") ;;
	esac
	echo "${a[@]}"
}

# target CASE DIR: the file a workload uses in DIR.
target() {
	case $1 in
	w*) echo "$2/w" ;;
	*) echo "$2/f" ;;
	esac
}

# row CASE PATH LIMIT_MIB|- JSON [TICKS]: one table row from a fio result
# and the daemon's CPU ticks over the run (empty for no daemon), tagged
# with the round.
row() {
	python3 - "$ROUND" "$@" >>"$ROWS" <<'EOF'
import json, os, sys
rnd, case, path, limit, out = sys.argv[1:6]
ticks = sys.argv[6] if len(sys.argv) > 6 else ""
text = open(out).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
r = job["write"] if case.startswith("w") else job["read"]
mib = r["io_bytes"] / (r["runtime"] / 1000) / 2**20 if r["runtime"] else 0.0
iops = r["total_ios"] / (r["runtime"] / 1000) if r["runtime"] else 0.0
ratio = f"{mib / int(limit):.3f}" if limit != "-" else "-"
cpu = "-"
if ticks and r["total_ios"]:
    cpu = f"{int(ticks) / os.sysconf('SC_CLK_TCK') / r['total_ios'] * 1e6:.1f}"
print(f"{rnd}\t{case}\t{path}\t{mib:.1f}\t{iops:.0f}\t{ratio}\t{r['clat_ns']['max'] / 1e6:.1f}\t{cpu}")
EOF
}

# run CASE PATH LIMIT DIR [DAEMON_PID] [CGROUP]: one fio run as uid 1001.
run() {
	local cs=$1 path=$2 lim=$3 dir=$4 pid=${5:-} cg=${6:-} t0=0 t1=0 file
	file=$(target "$cs" "$dir")
	rm -f "$DATA/w"
	sync
	drop_caches
	if [ "$cs" = r1mhot ]; then
		bg_wait "${AS_USER[@]}" cat "$file" >/dev/null || die "reading $file to warm the cache failed"
	fi
	[ -z "$pid" ] || t0=$(cpu_ticks "$pid")
	local cmd=("${AS_USER[@]}" fio --output-format=json --name="$cs" --filename="$file")
	# shellcheck disable=SC2046 # word splitting of fio_args is intended
	if [ -n "$cg" ]; then
		in_cgroup "$cg" "${cmd[@]}" $(fio_args "$cs") >"$WORK/run.json" 2>"$WORK/run.err"
	else
		bg_wait "${cmd[@]}" $(fio_args "$cs") >"$WORK/run.json" 2>"$WORK/run.err"
	fi || { cat "$WORK/run.err" >&2; die "fio ($cs, $path) failed"; }
	[ -z "$pid" ] || t1=$(cpu_ticks "$pid")
	if [ -n "$pid" ]; then
		row "$cs" "$path" "$lim" "$WORK/run.json" $((t1 - t0))
	else
		row "$cs" "$path" "$lim" "$WORK/run.json"
	fi
}

# through_sluice CASE PATH LIMIT_MIB|- FLAGS...: one run through a fresh
# sluice mount.
through_sluice() {
	local cs=$1 path=$2 lim=$3
	shift 3
	if [ -z "$SLUICE" ]; then
		printf '%s\t%s\t%s\t(sluice did not build)\n' "$ROUND" "$cs" "$path" >>"$ROWS"
		return
	fi
	sluice_mount "$WORK/sluice.log" "$DATA" "$WORK/mnt" --group 't uid=1001' "$@"
	run "$cs" "$path" "$lim" "$WORK/mnt" "$FUSE_PID"
	stop_fuse
}

# paths CASE: the paths a workload runs on, one per line: a label, then
# what runs it (native, loopback, or sluice and its flags).
paths() {
	local unreached='t riops=10000000'
	[[ $1 == w* ]] && unreached='t wbps=10GiB'
	printf '%s\n' "native|native" "loopback|loopback" "sluice unlimited|sluice" \
		"sluice unreached|sluice --limit '$unreached'"
	if [ "$1" = r4k ]; then
		echo "sluice unreached, direct|sluice --limit '$unreached' --cache-mode direct"
	fi
	if [[ $1 == w* ]]; then
		printf '%s\n' "sluice unlimited, write cache|sluice --write-cache" \
			"sluice unreached, write cache|sluice --limit '$unreached' --write-cache" \
			"sluice unreached, write cache, kernel|sluice --limit '$unreached' --write-cache --cache-mode kernel"
	fi
}

# limit_paths L: the paths of the runs at a limit of L MiB/s.
limit_paths() {
	printf '%s\n' "kernel $1 MiB/s|kernel" \
		"sluice direct $1 MiB/s|sluice --limit 't rbps=$1MiB' --cache-mode direct" \
		"sluice kernel $1 MiB/s|sluice --limit 't rbps=$1MiB' --cache-mode kernel"
}

# run_path CASE LIMIT_MIB|- LABEL WHAT: one run of a workload on a path.
run_path() {
	local cs=$1 lim=$2 label=$3 what=$4 flags
	log "round $ROUND, $cs: $label"
	case $what in
	native) run "$cs" native - "$DATA" ;;
	loopback)
		start_fuse "$WORK/loopback.log" "$WORK/mnt" "$LOOPBACK" -no-passthrough -allow-other "$DATA" "$WORK/mnt"
		run "$cs" loopback - "$WORK/mnt" "$FUSE_PID"
		stop_fuse
		;;
	kernel)
		echo "$MAJMIN $((lim * 1048576))" >"$CG/blkio.throttle.read_bps_device"
		run limit "$label" "$lim" "$DATA" "" "$CG"
		echo "$MAJMIN 0" >"$CG/blkio.throttle.read_bps_device"
		;;
	sluice*)
		eval "flags=(${what#sluice})"
		through_sluice "$cs" "$label" "$lim" "${flags[@]}"
		;;
	esac
}

for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
	for cs in $CASES; do
		while IFS='|' read -r label what; do
			run_path "$cs" - "$label" "$what"
		done < <(paths "$cs" | rotated $((ROUND - 1)))
	done
	for L in $LIMITS; do
		while IFS='|' read -r label what; do
			run_path limit "$L" "$label" "$what"
		done < <(limit_paths "$L" | rotated $((ROUND - 1)))
	done
done

echo
echo "fio as uid 1001, ${RT}s per run, caches dropped; sluice (or loopback) CPU per read() or write() call"
median_table "$ROWS" "$WORK/table" "$(printf 'case\tpath\tMiB/s\tIOPS\tachieved/limit\tclat max ms\tdaemon CPU us/op')" \
	"MiB/s by round" 0
python3 - "$ROWS" "$WORK/ratios" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]

# The ratios the targets name, each within one round.
def mib(case, path):
    return {r[0]: float(r[3]) for r in rows if (r[1], r[2]) == (case, path) and len(r) == 8}

with open(sys.argv[2], "w") as out:
    print("ratio (same round)\tmedian\tby round", file=out)

    def ratio(name, a, b):
        vals = [a[k] / b[k] for k in sorted(set(a) & set(b), key=int) if b[k]]
        if vals:
            print(f"{name}\t{statistics.median(vals):.2f}\t" + ", ".join(f"{v:.2f}" for v in vals), file=out)

    for c in dict.fromkeys(r[1] for r in rows):
        if c == "limit":
            continue
        ratio(f"{c}: unreached / unlimited", mib(c, "sluice unreached"), mib(c, "sluice unlimited"))
        if c.startswith("w"):
            ratio(f"{c}: unreached / unlimited, write cache", mib(c, "sluice unreached, write cache"),
                  mib(c, "sluice unlimited, write cache"))
            ratio(f"{c}: unlimited, write cache / native", mib(c, "sluice unlimited, write cache"), mib(c, "native"))
        if c.startswith("r1m"):
            ratio(f"{c}: unlimited / native", mib(c, "sluice unlimited"), mib(c, "native"))
EOF
print_table "$WORK/table"
echo
print_table "$WORK/ratios"
cat <<'EOF'

targets: a limited group below its limit >= 0.8x the unlimited group in
every case; unlimited 4k buffered writes >= 0.5x native (--write-cache);
unlimited 1 MiB sequential reads >= 0.8x native (r1m cold, r1mhot in
the page cache); achieved/limit
0.99-1.01 at 50, 100 and 200 MiB/s with clat max <= 20 ms. --cache-mode
auto picks kernel from 32 MiB/s (and 512 IOPS) up, direct below.
EOF
