#!/usr/bin/env bash
# Seed 004: which copy of a mirror should serve a read? btrfs RAID1's
# read policy (pid: caller pid mod mirrors, the only one this kernel has)
# against a sluice mirror set under each of its read policies, on a pair
# of devices where one is slow, and on an identical pair.
#
# usage: mirrors.sh [runtime_s=10] [slow_iops=300]
#
# Four loop devices (O_DIRECT on their image files): a btrfs raid1 over
# two, an ext4 on each of the other two for sluice's mirrors (one directory
# each). "Slow": cgroup v1 blkio throttling of the reading process on one
# device of each pair, at slow_iops reads/s and 40 MiB/s (fio for btrfs;
# the sluice daemon, which does the device reads, for sluice). fio
# --direct=1, 4 jobs, each on its own 512 MiB file: 4k random reads QD1,
# and 1 MiB sequential reads. Reported: MiB/s, clat p99 and max.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-10}
SLOW_IOPS=${2:-300}
[[ $RT =~ ^[1-9][0-9]*$ ]] || die "runtime_s must be a positive integer (got '$RT'); usage: mirrors.sh [runtime_s] [slow_iops]"
[[ $SLOW_IOPS =~ ^[1-9][0-9]*$ ]] || die "slow_iops must be a positive integer (got '$SLOW_IOPS'); usage: mirrors.sh [runtime_s] [slow_iops]"
command -v mkfs.btrfs >/dev/null || die "mkfs.btrfs not found (install btrfs-progs): the kernel reference is btrfs raid1"
start_blkio_bench

FILE_MIB=512
JOBS=4
IMG_MIB=$((FILE_MIB * JOBS + 768))
log "runtime ${RT}s per run; slow device: ${SLOW_IOPS} reads/s, 40 MiB/s; ${JOBS} files of ${FILE_MIB} MiB per mirror"

# loop_direct NAME: a loop device with O_DIRECT on its image; sets LOOP, MAJMIN.
loop_direct() {
	make_loop_dev "$IMG_MIB" "$1"
	losetup --direct-io=on "$LOOP" 2>/dev/null || log "no direct I/O for $LOOP: reads may hit the image's page cache"
}

loop_direct btrfs-fast
BF=$LOOP
loop_direct btrfs-slow
BS=$LOOP
BS_MAJMIN=$MAJMIN
mkfs.btrfs -q -f -d raid1 -m raid1 "$BF" "$BS" >/dev/null
mkdir -p "$WORK/btrfs"
mount "$BF" "$WORK/btrfs"
MOUNTS+=("$WORK/btrfs")
policy=$(cat /sys/fs/btrfs/*/read_policy 2>/dev/null | head -1 || true)
log "btrfs raid1 read policy: ${policy:-unknown}"

make_loop_fs "$IMG_MIB" "$WORK/fast"
losetup --direct-io=on "$LOOP" 2>/dev/null || true
make_loop_fs "$IMG_MIB" "$WORK/slow"
losetup --direct-io=on "$LOOP" 2>/dev/null || true
ES_MAJMIN=$MAJMIN

for d in "$WORK/btrfs" "$WORK/fast"; do
	for ((j = 0; j < JOBS; j++)); do
		write_file "$d/f.$j" "$FILE_MIB"
	done
done
for ((j = 0; j < JOBS; j++)); do
	cp "$WORK/fast/f.$j" "$WORK/slow/f.$j"
done
sync
make_cgroup "sluice-bench-mirrors.$$"

# slow on|off: the throttle on the slow device of each pair.
slow() {
	local iops=0 bps=0 mm
	if [ "$1" = on ]; then
		iops=$SLOW_IOPS
		bps=$((40 << 20))
	fi
	for mm in "$BS_MAJMIN" "$ES_MAJMIN"; do
		echo "$mm $iops" >"$CG/blkio.throttle.read_iops_device"
		echo "$mm $bps" >"$CG/blkio.throttle.read_bps_device"
	done
}

# mirror_share WHAT: where the reads of the last workload went, from the
# mount's stat before and after it.
mirror_share() {
	python3 - "$WORK/before.json" "$WORK/after.json" "$1" <<'EOF'
import json, sys
b, a = (json.load(open(f)) for f in sys.argv[1:3])
ms = list(zip(b.get("mirrors") or [], a.get("mirrors") or []))
if ms:
    n = [y["reads"] - x["reads"] for x, y in ms]
    e = [y["errors"] - x["errors"] for x, y in ms]
    h = [y.get("hedged", 0) - x.get("hedged", 0) for x, y in ms]
    print("# " + sys.argv[3] + ": reads per mirror " + ", ".join(
        f"{y['dir'].rsplit('/', 1)[-1]} {k} ({100 * k / max(sum(n), 1):.1f} %)" for (x, y), k in zip(ms, n))
        + (f"; hedged {h}" if any(h) else "") + (f"; errors {e}" if any(e) else ""), file=sys.stderr)
EOF
}

ROWS=$WORK/rows
printf 'pair\tpath\t4k rand MiB/s\t4k p99 ms\t4k max ms\t1M seq MiB/s\t1M p99 ms\t1M max ms\n' >"$ROWS"

# measure PAIR PATH DIR: both workloads on DIR, fio in the cgroup.
measure() {
	local pair=$1 path=$2 dir=$3 w row="$1\t$2"
	for w in "--rw=randread --bs=4k" "--rw=read --bs=1M"; do
		drop_caches
		[ "$dir" != "$WORK/mnt" ] || sluice_stat "$dir" "$WORK/before.json" || true
		# shellcheck disable=SC2086 # $w is two fio options
		in_cgroup "$CG" fio --output-format=json --output="$WORK/run.json" --name=m \
			--directory="$dir" --filename_format='f.$jobnum' --size="${FILE_MIB}M" \
			--numjobs="$JOBS" --group_reporting --direct=1 --ioengine=psync --iodepth=1 \
			--runtime="$RT" --time_based $w 2>"$WORK/run.err" ||
			{ cat "$WORK/run.err" "$WORK/run.json" >&2; die "fio ($pair, $path, $w) failed"; }
		[ "$dir" != "$WORK/mnt" ] || { sluice_stat "$dir" "$WORK/after.json" && mirror_share "$pair, $path, ${w#--rw=}"; } || true
		row+="\t$(fio_get "$WORK/run.json" 'round(r["bw"] / 1024, 1)')"
		row+="\t$(fio_get "$WORK/run.json" 'round(r["clat_ns"]["percentile"]["99.000000"] / 1e6, 2)')"
		row+="\t$(fio_get "$WORK/run.json" 'round(r["clat_ns"]["max"] / 1e6, 2)')"
	done
	printf '%b\n' "$row" >>"$ROWS"
}

# through_sluice PAIR PATH MOUNT-ARGS...: a fresh mount, its daemon in the
# cgroup, then measure.
through_sluice() {
	local pair=$1 path=$2
	shift 2
	if [ -z "$SLUICE" ]; then
		printf '%s\t%s\t(sluice did not build)\n' "$pair" "$path" >>"$ROWS"
		return
	fi
	start_fuse "$WORK/sluice.log" "$WORK/mnt" "$SLUICE" mount "$@" "$WORK/mnt"
	echo "$FUSE_PID" >"$CG/cgroup.procs"
	measure "$pair" "$path" "$WORK/mnt"
	stop_fuse
}

for pair in mixed identical; do
	if [ $pair = mixed ]; then slow on; else slow off; fi
	log "$pair pair: btrfs raid1"
	measure $pair "btrfs raid1 (pid)" "$WORK/btrfs"
	log "$pair pair: sluice over the fast device alone"
	through_sluice $pair "sluice, fast device alone" "$WORK/fast"
	for p in pid roundrobin latency adaptive; do
		log "$pair pair: sluice mirrors, $p"
		through_sluice $pair "sluice mirrors, $p" --mirror "$WORK/fast" --mirror "$WORK/slow" --read-policy $p
	done
done
slow off

echo
echo "mirror reads (fio --direct=1, $JOBS jobs, ${RT}s each; slow device: ${SLOW_IOPS} reads/s, 40 MiB/s)"
print_table "$ROWS"
echo
python3 - "$ROWS" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
t = {(r[0], r[1]): [float(x) for x in r[2:]] for r in rows if len(r) == 8}
def g(pair, path):
    return t.get((pair, path))
ok = True
def check(what, cond):
    global ok
    print(("ok    " if cond else "SHORT ") + what)
    ok &= cond
a, f = g("mixed", "sluice mirrors, adaptive"), g("mixed", "sluice, fast device alone")
if a and f:
    for i, w in ((0, "4k random"), (3, "1M sequential")):
        check(f"mixed pair, {w}: adaptive {a[i]} MiB/s >= 0.95 x fast device alone {f[i]} ({a[i] / f[i]:.3f})", a[i] >= 0.95 * f[i])
        check(f"mixed pair, {w}: adaptive max clat {a[i + 2]} ms <= 2 x fast device alone {f[i + 2]} ms", a[i + 2] <= 2 * f[i + 2])
ai = g("identical", "sluice mirrors, adaptive")
best = [max(x, y) for x, y in zip(g("identical", "sluice mirrors, pid") or [0] * 6, g("identical", "sluice mirrors, roundrobin") or [0] * 6)]
if ai:
    for i, w in ((0, "4k random"), (3, "1M sequential")):
        check(f"identical pair, {w}: adaptive {ai[i]} MiB/s >= 0.97 x best of pid, roundrobin {best[i]} ({ai[i] / best[i]:.3f})", ai[i] >= 0.97 * best[i])
for pair in ("mixed", "identical"):
    b, a = g(pair, "btrfs raid1 (pid)"), g(pair, "sluice mirrors, adaptive")
    if a and b:
        for i, w in ((0, "4k random"), (3, "1M sequential")):
            check(f"{pair} pair, {w}: adaptive {a[i]} MiB/s > btrfs pid {b[i]} ({a[i] / b[i]:.3f})", a[i] > b[i])
EOF
