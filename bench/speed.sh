#!/usr/bin/env bash
# What a limit costs below it, and how precise it is at high rates, for
# buffered sequential 4k reads, with sluice's own CPU time per read.
#
# usage: speed.sh [runtime_s=10] [limits_mib="50 100 200"]
#
# One loop ext4, one file, caches dropped before each run, fio 1 job
# (--rw=read --bs=4k --direct=0):
#   below a limit   native; sluice with the group unlimited; sluice with a
#                   limit it never reaches (riops=10000000) served with
#                   --cache-mode direct and with --cache-mode kernel
#   at each limit   kernel blk-throttle (cgroup v1 read_bps_device on the
#                   loop device); sluice --cache-mode direct and kernel
# Reported: MiB/s, achieved/limit, clat max, and sluice's CPU time
# (utime + stime of the daemon, /proc) per read() call.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-10}
LIMITS=${2:-"50 100 200"}
[[ $RT =~ ^[1-9][0-9]*$ ]] || die "runtime_s must be a positive integer (got '$RT'); usage: speed.sh [runtime_s] [limits_mib]"
check_limits "$LIMITS"

start_blkio_bench

FILE_MIB=4096
IMG_MIB=$((FILE_MIB + 512))
log "loop ext4 of ${IMG_MIB} MiB, test file ${FILE_MIB} MiB, runtime ${RT}s, limits: $LIMITS MiB/s"
make_loop_fs "$IMG_MIB" "$WORK/fs"
DATA=$WORK/fs/data
mkdir -p "$DATA"
write_file "$DATA/f" "$FILE_MIB"
chmod 755 "$WORK" "$WORK/fs" "$DATA"
chmod 644 "$DATA/f"
make_cgroup "sluice-bench-speed.$$"

FIO_JOB=(--name=seq --rw=read --bs=4k --direct=0 --numjobs=1 --ioengine=psync
	--runtime="$RT" --time_based --size="${FILE_MIB}M")
AS_USER=(setpriv --reuid=1001 --regid=1001 --clear-groups)

ROWS=$WORK/rows
: >"$ROWS"

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# row CASE PATH LIMIT JSON [TICKS]: one table row from a fio result and
# the daemon's CPU ticks over the run (empty for no daemon).
row() {
	python3 - "$@" >>"$ROWS" <<'EOF'
import json, os, sys
case, path, limit, out = sys.argv[1:5]
ticks = sys.argv[5] if len(sys.argv) > 5 else ""
text = open(out).read()
r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
mib = r["io_bytes"] / (r["runtime"] / 1000) / 2**20 if r["runtime"] else 0.0
ratio = f"{mib / int(limit):.3f}" if limit != "-" else "-"
cpu = "-"
if ticks and r["total_ios"]:
    cpu = f"{int(ticks) / os.sysconf('SC_CLK_TCK') / r['total_ios'] * 1e6:.1f}"
print(f"{case}\t{path}\t{mib:.1f}\t{ratio}\t{r['clat_ns']['max'] / 1e6:.1f}\t{cpu}")
EOF
}

# through_sluice CASE PATH LIMIT_MIB|- FLAGS...: one fio run as uid 1001
# through a fresh mount.
through_sluice() {
	local cs=$1 path=$2 lim=$3 t0 t1
	shift 3
	if [ -z "$SLUICE" ]; then
		printf '%s\t%s\t(sluice did not build)\n' "$cs" "$path" >>"$ROWS"
		return
	fi
	sluice_mount "$WORK/sluice.log" "$DATA" "$WORK/mnt" --group 't uid=1001' "$@"
	drop_caches
	t0=$(cpu_ticks "$FUSE_PID")
	bg_wait "${AS_USER[@]}" fio --output-format=json \
		--filename="$WORK/mnt/f" "${FIO_JOB[@]}" >"$WORK/run.json" 2>"$WORK/run.err" ||
		{ cat "$WORK/run.err" >&2; die "fio ($cs, $path) failed"; }
	t1=$(cpu_ticks "$FUSE_PID")
	stop_fuse
	row "$cs" "$path" "$lim" "$WORK/run.json" $((t1 - t0))
}

log "below a limit: native"
drop_caches
bg_wait "${AS_USER[@]}" fio --output-format=json \
	--filename="$DATA/f" "${FIO_JOB[@]}" >"$WORK/run.json" 2>"$WORK/run.err" ||
	{ cat "$WORK/run.err" >&2; die "fio (native) failed"; }
row "below a limit" native - "$WORK/run.json"
log "below a limit: sluice, unlimited"
through_sluice "below a limit" "sluice, unlimited" -
for mode in direct kernel; do
	log "below a limit: sluice, riops=10000000, --cache-mode $mode"
	through_sluice "below a limit" "sluice $mode, unreached limit" - --limit 't riops=10000000' --cache-mode "$mode"
done

for L in $LIMITS; do
	log "limit ${L} MiB/s: kernel blk-throttle"
	echo "$MAJMIN $((L * 1048576))" >"$CG/blkio.throttle.read_bps_device"
	drop_caches
	in_cgroup "$CG" "${AS_USER[@]}" fio --output-format=json \
		--filename="$DATA/f" "${FIO_JOB[@]}" >"$WORK/run.json" 2>"$WORK/run.err" ||
		{ cat "$WORK/run.err" >&2; die "fio (kernel, ${L} MiB/s) failed"; }
	echo "$MAJMIN 0" >"$CG/blkio.throttle.read_bps_device"
	row "${L} MiB/s" kernel "$L" "$WORK/run.json"
	for mode in direct kernel; do
		log "limit ${L} MiB/s: sluice --cache-mode $mode"
		through_sluice "${L} MiB/s" "sluice $mode" "$L" --limit "t rbps=${L}MiB" --cache-mode "$mode"
	done
done

echo
echo "buffered sequential 4k reads (fio, 1 job, ${RT}s, caches dropped); sluice CPU per read() call"
{
	printf 'case\tpath\tMiB/s\tachieved/limit\tclat max ms\tsluice CPU us/read\n'
	cat "$ROWS"
} >"$WORK/table"
print_table "$WORK/table"
cat <<'EOF'

targets: a limited group below its limit >= 0.8x the unlimited group;
achieved/limit 0.99-1.01 at 50, 100 and 200 MiB/s with clat max <= 20 ms.
--cache-mode auto picks kernel from 64 MiB/s (and 512 IOPS) up, direct below.
EOF
