#!/usr/bin/env bash
# Seed 004: which copy of a mirror should serve a read? btrfs RAID1's
# read policy (pid: caller pid mod mirrors, the only one this kernel has)
# against a sluice mirror set under each of its read policies, on a pair
# of devices where one is slow, and on an identical pair.
#
# usage: mirrors.sh [runtime_s=10] [slow_iops=300] [rounds=1]
#   env MIRRORS_PATHS (default "btrfs alone pid roundrobin latency adaptive"):
#     the paths to run (btrfs raid1, sluice over the fast device alone,
#     sluice mirrors under each read policy); MIRRORS_PAIRS (default
#     "mixed identical"): with one device slow, with both fast. A target
#     whose paths were not run is not checked.
#
# Four loop devices (O_DIRECT on their image files): a btrfs raid1 over
# two, an ext4 on each of the other two for sluice's mirrors (one directory
# each). "Slow": cgroup v1 blkio throttling of the reading process on one
# device of each pair, at slow_iops reads/s and 40 MiB/s (fio for btrfs;
# the sluice daemon, which does the device reads, for sluice). fio
# --direct=1, 4 jobs, each on its own 512 MiB file: 4k random reads QD1,
# and 1 MiB sequential reads. Reported: MiB/s, clat p99 and max; and, as
# each run of a sluice mirror set ends, where its reads went (from sluice
# stat: reads per mirror, their mean time, reads hedged). With
# more than one round, each round runs every path again with their order
# rotated by one; the table gives medians, and each target is checked on
# the median of its ratio taken within each round (the speed of this kind
# of VM moves by up to 2x between runs of the same case).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-10}
SLOW_IOPS=${2:-300}
ROUNDS=${3:-1}
[[ $RT =~ ^[1-9][0-9]*$ ]] || die "runtime_s must be a positive integer (got '$RT'); usage: mirrors.sh [runtime_s] [slow_iops] [rounds]"
[[ $SLOW_IOPS =~ ^[1-9][0-9]*$ ]] || die "slow_iops must be a positive integer (got '$SLOW_IOPS'); usage: mirrors.sh [runtime_s] [slow_iops] [rounds]"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "rounds must be a positive integer (got '$ROUNDS'); usage: mirrors.sh [runtime_s] [slow_iops] [rounds]"
PATHS=()
for p in ${MIRRORS_PATHS:-btrfs alone pid roundrobin latency adaptive}; do
	case $p in
	btrfs) PATHS+=("btrfs raid1 (pid)") ;;
	alone) PATHS+=("sluice, fast device alone") ;;
	pid | roundrobin | latency | adaptive) PATHS+=("sluice mirrors, $p") ;;
	*) die "unknown path '$p' in MIRRORS_PATHS (want btrfs alone pid roundrobin latency adaptive)" ;;
	esac
done
for pair in ${MIRRORS_PAIRS:-mixed identical}; do
	[[ $pair = mixed || $pair = identical ]] || die "unknown pair '$pair' in MIRRORS_PAIRS (want mixed identical)"
done
command -v mkfs.btrfs >/dev/null || die "mkfs.btrfs not found (install btrfs-progs): the kernel reference is btrfs raid1"
start_blkio_bench

FILE_MIB=512
JOBS=4
IMG_MIB=$((FILE_MIB * JOBS + 768))
log "runtime ${RT}s per run; slow device: ${SLOW_IOPS} reads/s, 40 MiB/s; ${JOBS} files of ${FILE_MIB} MiB per mirror; $ROUNDS round(s)"

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
    took = [y.get("read_ns", 0) - x.get("read_ns", 0) for x, y in ms]
    print("# " + sys.argv[3] + ": reads per mirror " + ", ".join(
        f"{y['dir'].rsplit('/', 1)[-1]} {k} ({100 * k / max(sum(n), 1):.1f} %"
        + (f", mean {d / k / 1e6:.3f} ms, {d / 1e9:.2f} s in all" if k else "") + ")"
        for (x, y), k, d in zip(ms, n, took))
        + (f"; hedged {h}" if any(h) else "") + (f"; errors {e}" if any(e) else ""), file=sys.stderr)
EOF
}

ROWS=$WORK/rows
: >"$ROWS"

# measure PAIR PATH DIR: both workloads on DIR, fio in the cgroup.
measure() {
	local pair=$1 path=$2 dir=$3 w row="$ROUND\t$1\t$2"
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
		printf '%s\t%s\t%s\t(sluice did not build)\n' "$ROUND" "$pair" "$path" >>"$ROWS"
		return
	fi
	start_fuse "$WORK/sluice.log" "$WORK/mnt" "$SLUICE" mount "$@" "$WORK/mnt"
	echo "$FUSE_PID" >"$CG/cgroup.procs"
	measure "$pair" "$path" "$WORK/mnt"
	stop_fuse
}

# run_path PAIR LABEL: one path's run.
run_path() {
	local pair=$1 label=$2
	log "round $ROUND, $pair pair: $label"
	case $label in
	btrfs*) measure "$pair" "$label" "$WORK/btrfs" ;;
	*alone) through_sluice "$pair" "$label" "$WORK/fast" ;;
	*) through_sluice "$pair" "$label" --mirror "$WORK/fast" --mirror "$WORK/slow" --read-policy "${label##*, }" ;;
	esac
}

for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
	for pair in ${MIRRORS_PAIRS:-mixed identical}; do
		if [ $pair = mixed ]; then slow on; else slow off; fi
		while read -r label; do
			run_path $pair "$label"
		done < <(printf '%s\n' "${PATHS[@]}" | rotated $((ROUND - 1)))
	done
done
slow off

echo
echo "mirror reads (fio --direct=1, $JOBS jobs, ${RT}s each; slow device: ${SLOW_IOPS} reads/s, 40 MiB/s; $ROUNDS round(s))"
median_table "$ROWS" "$WORK/table" \
	"$(printf 'pair\tpath\t4k rand MiB/s\t4k p99 ms\t4k max ms\t1M seq MiB/s\t1M p99 ms\t1M max ms')" \
	"4k, 1M MiB/s by round" 0,3
print_table "$WORK/table"
echo
python3 - "$ROWS" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
t = {}
for r in rows:
    if len(r) == 9:
        t.setdefault(r[0], {})[(r[1], r[2])] = [float(x) for x in r[3:]]
ok = True

def check(what, pairs, cmp):
    # pairs: per round, (a, b) or None; the target holds on the median of a/b.
    global ok
    vals = [a / b for a, b in pairs if b]
    if not vals:
        return
    m = statistics.median(vals)
    good = cmp(m)
    rounds = ", ".join(f"{v:.3f}" for v in vals)
    print(("ok    " if good else "SHORT ") + f"{what}: {m:.3f}" + (f" (by round {rounds})" if len(vals) > 1 else ""))
    ok &= good

def each(f):
    out = []
    for rnd in sorted(t, key=int):
        try:
            out.append(f(t[rnd]))
        except (KeyError, TypeError):
            pass
    return out

W = ((0, "4k random"), (3, "1M sequential"))
for i, w in W:
    check(f"mixed pair, {w}: adaptive / fast device alone >= 0.95",
          each(lambda x: (x[("mixed", "sluice mirrors, adaptive")][i], x[("mixed", "sluice, fast device alone")][i])),
          lambda m: m >= 0.95)
    check(f"mixed pair, {w}: adaptive max clat / fast device alone's <= 2",
          each(lambda x: (x[("mixed", "sluice mirrors, adaptive")][i + 2], x[("mixed", "sluice, fast device alone")][i + 2])),
          lambda m: m <= 2)
for i, w in W:
    check(f"identical pair, {w}: adaptive / best of pid, roundrobin >= 0.97",
          each(lambda x: (x[("identical", "sluice mirrors, adaptive")][i],
                          max(x[("identical", "sluice mirrors, pid")][i], x[("identical", "sluice mirrors, roundrobin")][i]))),
          lambda m: m >= 0.97)
for pair in ("mixed", "identical"):
    for i, w in W:
        check(f"{pair} pair, {w}: adaptive / btrfs pid > 1",
              each(lambda x: (x[(pair, "sluice mirrors, adaptive")][i], x[(pair, "btrfs raid1 (pid)")][i])),
              lambda m: m > 1)
EOF
