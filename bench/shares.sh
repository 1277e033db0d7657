#!/usr/bin/env bash
# Proportional device shares between tenants: when SOURCE's device is
# saturated, do top-level groups share it by weight in device time (a
# 4 KiB random reader and a 1 MiB sequential reader of equal weight get
# equal device time), floors served first, and does nobody wait when it is
# not saturated?
#
# usage: shares.sh [runtime_s=20] [rounds=1]
#   env SHARES_IOPS (default 3000), SHARES_MIBS (default 40): the device's
#       capacity, set as blk-throttle limits (reads and writes alike)
#   env SHARES_PATHS (default "native sluice sluice-policy bfq"): the paths
#       to run; bfq runs only where the loop device offers the scheduler
#   env SHARES_ANCHOR_SCHED (default bfq): a test of the script only: run
#       the bfq path's steps with another scheduler (mq-deadline), whose
#       cgroups have no blkio.bfq.weight, so no weight is set
#
# The device: one loop ext4 (its image read with O_DIRECT), slowed at the
# block layer by a cgroup v1 blkio cgroup with read_iops_device,
# read_bps_device, write_iops_device and write_bps_device on the loop
# device's MAJ:MIN, holding every process that submits I/O to it: the
# sluice daemon (it moves itself into the cgroup before it execs) and, for
# the native path, the tenants' fio. sluice is mounted with
# --passthrough=false, so every read of a tenant reaches the daemon.
#
# Verified by experiment on this VM (Linux 6.18, 2 vCPUs, loop image on
# virtio disk), limits 3000 IOPS and 40 MiB/s, fio as uid 1001 through a
# sluice mount whose daemon sat in the cgroup: O_DIRECT 4 KiB random reads
# 2998 IOPS at QD1 and QD4, and the cgroup's blkio.throttle.io_serviced
# grew by 3000 reads/s; O_DIRECT 1 MiB sequential 39.9 MiB/s (~70 device
# reads/s in the cgroup); buffered 4 KiB sequential 39.8 MiB/s (~80 device
# reads/s of ~512 KiB readahead); buffered 4 KiB random 2997 IOPS. The same
# daemon outside the cgroup: 13.8 k IOPS (QD4) and 1234 MiB/s, so the
# throttle, not sluice, is what saturates. Native fio in the cgroup gave
# the same figures; outside it 11-35 k IOPS (QD4; the host caches the
# image) and 1470 MiB/s.
# blk-throttle is a rate server: at 3000 IOPS, 4 KiB reads complete in
# 0.33 ms on average at QD1, 1.32 ms at QD4 and 5.3 ms at QD16 (Little's
# law: the mean grows with the queue depth as soon as the limit binds, even
# at QD1), but not evenly: it lets a slice's budget through at once and
# holds the rest to the next slice, so the median stays near the loop
# device's own (50-110 us at QD1, 70-95 us at QD4, 0.24-0.31 ms at QD16;
# three runs) and the p99 is 0.7-2.6 ms at QD1 and 82-96 ms at QD4 and
# QD16 (the 100 ms slice). A capacity controller watching latency must
# look at the mean or the tail, not the median. The throttle holds one
# FIFO per cgroup and direction: with no policy a 4 KiB reader queued
# behind 1 MiB reads waits for their bytes budget, and gets 40-100 IOPS
# (1-3 % of its rate alone) beside a 1 MiB reader that keeps all 40 MiB/s
# (cases b and d, native and sluice).
#
# Paths, each with its own figures alone:
#   native         fio on the backing directory, all tenants in the
#                  throttled cgroup: the device's own (FIFO) split, no policy
#   sluice         sluice mount --passthrough=false with the tenants' groups
#                  and no limit: what sluice does with no policy
#   sluice-policy  the same mount with the weights and floor below (until
#                  sluice shares the device by weight, this splits like
#                  sluice: expected, the figures are printed all the same)
#   bfq            the kernel's anchor, only where the loop device offers
#                  the bfq scheduler: fio on the backing directory, each
#                  tenant in a blkio cgroup of its own with blkio.bfq.weight,
#                  no throttle (v1 blk-throttle is flat, so a throttle on a
#                  parent would not hold the children, and a throttle above
#                  the scheduler keeps the queue from building where bfq
#                  could weigh it): the unthrottled loop device is the
#                  saturated one; bfq has no floors (d0 is weight 100 there)
# Tenants (uids 1001-1010 via setpriv, each reading its own file, fio
# --direct=1 libaio QD4; 4k: random 4 KiB reads, 1M: sequential 1 MiB reads):
#   case  uid   group  reads  weight  floor
#   a     1001  a1     4k     200
#         1002  a2     4k     100
#   b     1003  b1     1M     200           (equal weights: 200 rather than
#         1004  b2     4k     200            the default 100, which would not
#                                            turn the policy on)
#   c     1005  c1     4k     100           the whole run
#         1006  c2     4k     200           the first half only
#   d     1007  d0     1M     100     SHARES_MIBS/4 MiB/s (rbps.min)
#         1008  d1     4k     200
#         1009  d2     4k     300
#         1010  d3     4k     400
# One mount of each sluice path holds every group; only the case's tenants
# run at a time. Alone figures, per path: 1001 (4k) alone and 1003 (1M)
# alone. A tenant's device-time share = its rate / the alone rate of its
# workload on the same path. Device figures from /sys/block/loopN/stat.
# Targets (sluice-policy; bfq's figures are checked as the anchor):
#   (a) a1/a2 share = 2, within 5 %
#   (b) b1/b2 share = 1, within 10 %
#   (c) c1's IOPS in the second half (from one second after c2 stops) >=
#       0.95 x its rate alone with no policy (sluice's alone on that path)
#   (d) d0's MiB/s within 2 % of its floor; d2/d1 share 1.5 and d3/d1 2.0,
#       each within 10 %
# A calibration first measures the throttled device natively: 4 KiB random
# reads at QD1 and QD4 (IOPS, clat mean and p99), 1 MiB sequential reads,
# and the same 4 KiB reads on the unthrottled loop device.
# With rounds > 1 each round runs the paths in an order rotated by one; the
# tables give medians and the targets are checked on the median of their
# per-round ratios.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

usage="usage: shares.sh [runtime_s=20] [rounds=1]"
RT=${1:-20}
ROUNDS=${2:-1}
IOPS=${SHARES_IOPS:-3000}
MIBS=${SHARES_MIBS:-40}
ALL_PATHS="native sluice sluice-policy bfq"
ANCHOR=${SHARES_ANCHOR_SCHED:-bfq}
PATHS=${SHARES_PATHS:-$ALL_PATHS}
[[ $RT =~ ^[1-9][0-9]*$ ]] && ((RT >= 6)) || die "runtime_s must be a whole number >= 6 (got '$RT'): case c needs a half of at least 3 s; $usage"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "rounds must be a positive integer (got '$ROUNDS'); $usage"
[[ $IOPS =~ ^[1-9][0-9]*$ ]] || die "SHARES_IOPS must be a positive integer (got '$IOPS')"
[[ $MIBS =~ ^[1-9][0-9]*$ ]] && ((MIBS >= 4)) || die "SHARES_MIBS must be a whole number >= 4 (got '$MIBS')"
for p in $PATHS; do
	[[ " $ALL_PATHS " == *" $p "* ]] || die "unknown path '$p' in SHARES_PATHS (want some of: $ALL_PATHS)"
done
command -v setpriv >/dev/null || die "setpriv not found (util-linux): the tenants run as uids 1001-1010"

HALF=$((RT / 2))
FLOOR_MIB=$((MIBS / 4))
CAL_RT=$((RT < 10 ? RT : 10))
FILE4K_MIB=256
FILE1M_MIB=$((RT * MIBS * 5 / 4 > 1024 ? RT * MIBS * 5 / 4 : 1024)) # no wrap within a run

UIDS=(1001 1002 1003 1004 1005 1006 1007 1008 1009 1010)
declare -A GROUP WL WEIGHT
i=0
for g in a1 a2 b1 b2 c1 c2 d0 d1 d2 d3; do
	GROUP[${UIDS[$i]}]=$g
	i=$((i + 1))
done
for u in "${UIDS[@]}"; do WL[$u]=4k; done
WL[1003]=1M
WL[1007]=1M
WEIGHT=([1001]=200 [1002]=100 [1003]=200 [1004]=200 [1005]=100 [1006]=200 [1007]=100 [1008]=200 [1009]=300 [1010]=400)
declare -A CASE_TENANTS=([alone4k]="1001" [alone1m]="1003" [a]="1001 1002" [b]="1003 1004" [c]="1005 1006" [d]="1007 1008 1009 1010")
CASES="alone4k alone1m a b c d"

TENANT_PIDS=()
DEV=""
SCHED_OLD=""

# restore_sched: the loop device's scheduler as it was before the bfq path.
restore_sched() {
	[ -n "$SCHED_OLD" ] || return 0
	echo "$SCHED_OLD" >"/sys/block/$DEV/queue/scheduler" 2>/dev/null ||
		echo "warning: could not restore $DEV's scheduler to $SCHED_OLD" >&2
	SCHED_OLD=""
}

# kill_tenants: stop any tenant fio still running (on exit or failure).
kill_tenants() {
	local p
	for p in "${TENANT_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${TENANT_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	TENANT_PIDS=()
}

require_env
require_blkio
setup_traps
# set +e first: under errexit, (exit $rc) would end the trap before cleanup.
trap 'rc=$?; set +e; kill_tenants; restore_sched; (exit $rc); cleanup' EXIT
make_workdir
chmod 755 "$WORK" # the tenants must reach the backing directory and the mount
build_sluice

run_paths=()
SKIPPED=()
for p in $PATHS; do
	case $p in
	sluice*)
		if [ -z "$SLUICE" ]; then
			SKIPPED+=("$p: sluice does not build")
			continue
		fi
		;;
	esac
	run_paths+=("$p")
done

IMG_MIB=$((FILE4K_MIB * 8 + FILE1M_MIB * 2 + 512))
log "loop ext4 of $IMG_MIB MiB throttled to $IOPS IOPS and $MIBS MiB/s; runtime ${RT}s, $ROUNDS round(s); floor of d0 ${FLOOR_MIB} MiB/s"
make_loop_fs "$IMG_MIB" "$WORK/fs"
losetup --direct-io=on "$LOOP" 2>/dev/null || log "no direct I/O for $LOOP: its reads may hit the image's page cache"
DEV=$LOOPNAME

# The kernel's anchor: bfq, where the loop device has it.
if [[ " ${run_paths[*]} " == *" bfq "* ]]; then
	if ! grep -qw "$ANCHOR" "/sys/block/$DEV/queue/scheduler"; then
		modprobe "$ANCHOR" 2>/dev/null || true
	fi
	if ! grep -qw "$ANCHOR" "/sys/block/$DEV/queue/scheduler"; then
		SKIPPED+=("bfq anchor: $DEV offers no $ANCHOR scheduler (only $(tr -d '[]' <"/sys/block/$DEV/queue/scheduler" | xargs), and modprobe $ANCHOR failed: CONFIG_IOSCHED_BFQ not set?); blkio.bfq.weight is the kernel's proportional weight on the v1 hierarchy, so the no-policy paths (native, sluice) are the only reference")
		mapfile -t run_paths < <(printf '%s\n' "${run_paths[@]}" | grep -vx bfq)
	fi
fi
((${#run_paths[@]})) || die "no path left to run"

DATA=$WORK/fs/data
mkdir -p "$DATA"
chmod 755 "$WORK/fs" "$DATA"
for u in "${UIDS[@]}"; do
	if [ "${WL[$u]}" = 1M ]; then mib=$FILE1M_MIB; else mib=$FILE4K_MIB; fi
	write_file "$DATA/t$u" "$mib"
	chown "$u:$u" "$DATA/t$u"
	chmod 600 "$DATA/t$u"
done
sync
log "warm-up pass over the tenants' files"
for u in "${UIDS[@]}"; do dd if="$DATA/t$u" of=/dev/null bs=1M status=none; done
LOGS=$WORK/logs
mkdir -p "$LOGS"
chmod 1777 "$LOGS"
MNT=$WORK/mnt
mkdir -p "$MNT"

# blk-throttle dispatches in slices of 100 ms on a rotational device and
# 20 ms on others, chosen when it is first configured for the device: a
# loop device is rotational, and at 1000 IOPS fio saw reads held up to
# 876 ms; marked non-rotational, up to 100 ms. The shorter slice is the
# nearer to a disk.
set_sysfs "/sys/block/$(basename "$LOOP")/queue/rotational" 0
make_cgroup "sluice-shares-disk.$$"
CGD=$CG
for k in read write; do
	echo "$MAJMIN $IOPS" >"$CGD/blkio.throttle.${k}_iops_device"
	echo "$MAJMIN $((MIBS << 20))" >"$CGD/blkio.throttle.${k}_bps_device"
done

declare -A BFQ_CG
if [[ " ${run_paths[*]} " == *" bfq "* ]]; then
	for u in "${UIDS[@]}"; do
		make_cgroup "sluice-shares-bfq.$$.$u"
		BFQ_CG[$u]=$CG
	done
fi

ROWS=$WORK/rows
: >"$ROWS"

# fio_args UID SECS: a tenant's fio arguments on its file in $DIR.
fio_args() {
	local u=$1 secs=$2 mib=$FILE4K_MIB rw="--rw=randread --bs=4k"
	if [ "${WL[$u]}" = 1M ]; then
		mib=$FILE1M_MIB
		rw="--rw=read --bs=1M"
	fi
	echo "--name=t$u --filename=$DIR/t$u --size=${mib}M --runtime=$secs --time_based --direct=1 --ioengine=libaio --iodepth=4 $rw --output-format=json"
}

# tenant UID CG|- OUT SECS [FIO-ARGS...]: start a tenant's fio in the
# background, as its uid, in cgroup CG (- for none).
tenant() {
	local u=$1 cg=$2 out=$3 secs=$4
	shift 4
	# shellcheck disable=SC2016,SC2046 # $$, $0, $@ belong to the inner bash; fio_args splits
	bash -c 'cg=$0; if [ "$cg" != - ]; then echo $$ >"$cg/cgroup.procs" || exit 1; fi; exec "$@"' "$cg" \
		setpriv --reuid="$u" --regid="$u" --clear-groups fio $(fio_args "$u" "$secs") "$@" >"$out" 2>"$out.err" &
	TENANT_PIDS+=($!)
}

# cg_of PATH UID: the cgroup a tenant's fio runs in on PATH.
cg_of() {
	case $1 in
	native) echo "$CGD" ;;
	bfq) echo "${BFQ_CG[$2]}" ;;
	*) echo - ;;
	esac
}

# dev_stat: reads completed and sectors read of the loop device.
dev_stat() { awk '{ print $1, $3 }' "/sys/block/$DEV/stat"; }
cg_reads() { awk -v d="$MAJMIN" '$1 == d && $2 == "Read" { print $3 }' "$CGD/blkio.throttle.io_serviced"; }

# run_case PATH CASE: the case's tenants at once; rows: round, case, path,
# key, figure (tenants: IOPS for 4k, MiB/s for 1M; "dev": device reads/s
# and MiB/s; c1's halves as 1005h1, 1005h2).
run_case() {
	local path=$1 cs=$2 u secs out rc=0 d0 d1 t0 t1 c0 c1 extra
	log "$(date +%T) round $ROUND/$ROUNDS, $path: case $cs (tenants ${CASE_TENANTS[$cs]})"
	drop_caches
	rm -f "$LOGS"/*
	d0=$(dev_stat)
	c0=$(cg_reads)
	t0=$(date +%s.%N)
	for u in ${CASE_TENANTS[$cs]}; do
		secs=$RT
		extra=()
		if [ "$cs" = c ] && [ "$u" = 1006 ]; then secs=$HALF; fi
		if [ "$cs" = c ] && [ "$u" = 1005 ]; then extra=(--write_iops_log="$LOGS/c1" --log_avg_msec=1000); fi
		tenant "$u" "$(cg_of "$path" "$u")" "$WORK/$cs.$u.json" "$secs" "${extra[@]}"
	done
	for u in "${TENANT_PIDS[@]}"; do wait "$u" || rc=1; done
	TENANT_PIDS=()
	t1=$(date +%s.%N)
	d1=$(dev_stat)
	c1=$(cg_reads)
	if [[ $path == sluice* ]] && [ "${c1:-0}" = "${c0:-0}" ]; then
		echo "warning: $path, case $cs: the throttled cgroup saw no reads: is the daemon in it?" >&2
	fi
	for u in ${CASE_TENANTS[$cs]}; do
		out=$WORK/$cs.$u.json
		if ! [ -s "$out" ] || ! grep -q '"jobs"' "$out"; then
			echo "warning: $path, case $cs: tenant $u's fio failed: $(tail -n 3 "$out.err" 2>/dev/null | tr '\n' ' ')" >&2
			printf '%s\t%s\t%s\t%s\tFAIL\n' "$ROUND" "$cs" "$path" "$u" >>"$ROWS"
			continue
		fi
		python3 - "$out" "${WL[$u]}" "$ROUND" "$cs" "$path" "$u" >>"$ROWS" <<'EOF'
import json, sys
out, wl, rnd, cs, path, u = sys.argv[1:]
text = open(out).read()
r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
fig = r["iops"] if wl == "4k" else r["bw_bytes"] / 2**20
print(f"{rnd}\t{cs}\t{path}\t{u}\t{fig:.2f}")
EOF
	done
	if [ "$cs" = c ]; then
		python3 - "$LOGS" "$HALF" "$RT" "$ROUND" "$path" >>"$ROWS" <<'EOF'
import glob, sys
logs, half, rt, rnd, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
pts = []
for f in glob.glob(logs + "/c1_iops*.log"):
    for line in open(f):
        p = [x.strip() for x in line.split(",")]
        if len(p) >= 3 and p[2] == "0":
            pts.append((int(p[0]), float(p[1])))
# Each point is the mean IOPS of the second before its time: the first
# half from the second second to c2's stop, the second from a second after.
h1 = [v for t, v in pts if 1900 <= t <= half * 1000 + 100]
h2 = [v for t, v in pts if (half + 2) * 1000 - 100 <= t <= rt * 1000 + 500]
for k, h in (("1005h1", h1), ("1005h2", h2)):
    print(f"{rnd}\tc\t{path}\t{k}\t" + (f"{sum(h) / len(h):.2f}" if h else "FAIL"))
EOF
	fi
	python3 - "$d0" "$d1" "$t0" "$t1" "$ROUND" "$cs" "$path" >>"$ROWS" <<'EOF'
import sys
(r0, s0), (r1, s1) = (map(int, x.split()) for x in sys.argv[1:3])
secs = float(sys.argv[4]) - float(sys.argv[3])
print(f"{sys.argv[5]}\t{sys.argv[6]}\t{sys.argv[7]}\tdev\t{(r1 - r0) / secs:.1f}\t{(s1 - s0) * 512 / 2**20 / secs:.2f}")
EOF
	[ "$rc" = 0 ] || echo "warning: $path, case $cs: a tenant's fio exited with an error" >&2
}

# sluice_in_cgroup LOGFILE MOUNT-FLAGS...: mount $DATA on $MNT, the daemon
# in the throttled cgroup (it moves itself there before it execs, so every
# thread it starts is in it). Returns 1 if the mount fails.
sluice_in_cgroup() {
	local logf=$1 g
	shift
	local groups=()
	for u in "${UIDS[@]}"; do groups+=(--group "${GROUP[$u]} uid=$u"); done
	# shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner bash
	try_fuse "$logf" "$MNT" bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CGD" \
		"$SLUICE" mount --passthrough=false "${groups[@]}" "$@" "$DATA" "$MNT" || return 1
	g=$(awk -F: '$2 == "blkio" { print $3 }' "/proc/$FUSE_PID/cgroup")
	[ "$g" = "/${CGD##*/}" ] || echo "warning: the sluice daemon is in blkio cgroup '$g', not ${CGD##*/}" >&2
}

POLICY=()
for u in "${UIDS[@]}"; do
	if [ "$u" = 1007 ]; then
		POLICY+=(--limit "${GROUP[$u]} rbps.min=${FLOOR_MIB}MiB")
	else
		POLICY+=(--limit "${GROUP[$u]} weight=${WEIGHT[$u]}")
	fi
done

# run_path PATH: every case on PATH.
run_path() {
	local path=$1 cs u
	DIR=$DATA
	case $path in
	sluice | sluice-policy)
		local flags=()
		[ "$path" = sluice ] || flags=("${POLICY[@]}")
		if ! sluice_in_cgroup "$WORK/$path.log" "${flags[@]}"; then
			echo "warning: mounting $path failed: its cases are skipped in round $ROUND" >&2
			return
		fi
		DIR=$MNT
		;;
	bfq)
		SCHED_OLD=$(sed 's/.*\[\(.*\)\].*/\1/' "/sys/block/$DEV/queue/scheduler")
		echo "$ANCHOR" >"/sys/block/$DEV/queue/scheduler" || die "cannot set $DEV's scheduler to $ANCHOR"
		for u in "${UIDS[@]}"; do
			if [ "$ANCHOR" != bfq ] && ! [ -e "${BFQ_CG[$u]}/blkio.bfq.weight" ]; then
				continue # SHARES_ANCHOR_SCHED: a test of the script, no weights
			fi
			echo "${WEIGHT[$u]}" >"${BFQ_CG[$u]}/blkio.bfq.weight" || die "cannot set blkio.bfq.weight of ${BFQ_CG[$u]}"
		done
		;;
	esac
	for cs in $CASES; do run_case "$path" "$cs"; done
	case $path in
	sluice*) stop_fuse ;;
	bfq) restore_sched ;;
	esac
}

# ---------------------------------------------------------------- calibration

# calibrate LABEL CG|- FIO-ARGS...: one native run as uid 1001 on its file.
CAL=$WORK/cal
: >"$CAL"
calibrate() {
	local label=$1 cg=$2 out=$WORK/cal.json
	shift 2
	drop_caches
	DIR=$DATA
	tenant 1001 "$cg" "$out" "$CAL_RT" "$@"
	wait "${TENANT_PIDS[0]}" || { cat "$out.err" >&2; die "calibration run ($label) failed"; }
	TENANT_PIDS=()
	python3 - "$out" "$label" >>"$CAL" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
c = r["clat_ns"]
p = c.get("percentile", {})
print("\t".join([sys.argv[2], f"{r['iops']:.0f}", f"{r['bw_bytes'] / 2**20:.1f}", f"{c['mean'] / 1e3:.0f}",
                 f"{p.get('50.000000', 0) / 1e3:.0f}", f"{p.get('99.000000', 0) / 1e3:.0f}"]))
EOF
}
log "calibration: the device natively, ${CAL_RT}s per run"
calibrate "throttled, 4k random QD1 (psync)" "$CGD" --ioengine=psync --iodepth=1
calibrate "throttled, 4k random QD4 (libaio)" "$CGD"
calibrate "throttled, 4k random QD16 (libaio)" "$CGD" --iodepth=16
calibrate "unthrottled, 4k random QD1 (psync)" - --ioengine=psync --iodepth=1
calibrate "unthrottled, 4k random QD4 (libaio)" - 
# 1 MiB: uid 1003's file, as the 1M tenants read it.
drop_caches
tenant 1003 "$CGD" "$WORK/cal.json" "$CAL_RT"
wait "${TENANT_PIDS[0]}" || { cat "$WORK/cal.json.err" >&2; die "calibration run (1M) failed"; }
TENANT_PIDS=()
python3 - "$WORK/cal.json" >>"$CAL" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
c = r["clat_ns"]
p = c.get("percentile", {})
print("\t".join(["throttled, 1M sequential QD4 (libaio)", f"{r['iops']:.0f}", f"{r['bw_bytes'] / 2**20:.1f}", f"{c['mean'] / 1e3:.0f}",
                 f"{p.get('50.000000', 0) / 1e3:.0f}", f"{p.get('99.000000', 0) / 1e3:.0f}"]))
EOF

# ---------------------------------------------------------------- rounds

for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
	mapfile -t order < <(printf '%s\n' "${run_paths[@]}" | rotated $((ROUND - 1)))
	for p in "${order[@]}"; do run_path "$p"; done
done

# ---------------------------------------------------------------- report

echo
echo "proportional device shares: one loop ext4 throttled to $IOPS IOPS and $MIBS MiB/s (cgroup v1"
echo "blk-throttle, reads and writes, holding the sluice daemon and native fio); tenants fio --direct=1"
echo "libaio QD4 as uids 1001-1010, each on its own file; ${RT}s per run, $ROUNDS round(s), paths rotated"
for s in "${SKIPPED[@]}"; do echo "skipped: $s"; done
if [ "$ANCHOR" != bfq ] && [[ " ${run_paths[*]} " == *" bfq "* ]]; then
	echo "note: the bfq path ran with the $ANCHOR scheduler and no weights (SHARES_ANCHOR_SCHED): a test of the script, not an anchor"
fi
echo
echo "device, native (uid 1001, ${CAL_RT}s per run):"
PYTHONPATH="$(dirname "$0")" python3 - "$CAL" <<'EOF'
import sys
from table import table
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
table([["run", "IOPS", "MiB/s", "clat mean us", "p50 us", "p99 us"]] + rows)
EOF
PYTHONPATH="$(dirname "$0")" python3 - "$ROWS" "$ROUNDS" "${run_paths[*]}" "$FLOOR_MIB" "$HALF" <<'EOF'
import statistics, sys
from table import table

rows_file, rounds, paths, floor, half = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), float(sys.argv[4]), int(sys.argv[5])
fig, dev, failed = {}, {}, set()
for l in open(rows_file):
    r = l.rstrip("\n").split("\t")
    rnd, cs, path, key = int(r[0]), r[1], r[2], r[3]
    if r[4] == "FAIL":
        failed.add((cs, path, key))
    elif key == "dev":
        dev[rnd, cs, path] = (float(r[4]), float(r[5]))
    else:
        fig[rnd, cs, path, key] = float(r[4])

RS = range(1, rounds + 1)
multi = rounds > 1
WL = {"1001": "4k", "1002": "4k", "1003": "1M", "1004": "4k", "1005": "4k", "1006": "4k",
      "1007": "1M", "1008": "4k", "1009": "4k", "1010": "4k", "1005h1": "4k", "1005h2": "4k"}
ALONE = {"4k": ("alone4k", "1001"), "1M": ("alone1m", "1003")}

def get(rnd, cs, path, key):
    return fig.get((rnd, cs, path, key))

def share(rnd, cs, path, key):
    v = get(rnd, cs, path, key)
    a = get(rnd, ALONE[WL[key]][0], path, ALONE[WL[key]][1])
    return v / a if v is not None and a else None

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None

def f(v, places=2):
    return "-" if v is None else f"{v:.{places}f}"

def rate(v, key):
    return "-" if v is None else (f"{v:.0f}" if WL[key] == "4k" else f"{v:.1f}")

def unit(key):
    return "IOPS" if WL[key] == "4k" else "MiB/s"

def by_round(vals):
    return ", ".join(f(v) for v in vals) if multi else None

M = "median " if multi else ""
# ratios[path][name] = per-round values, for the targets
ratios = {p: {} for p in paths}

def ratio_rounds(p, name, fn):
    vals = []
    for k in RS:
        try:
            vals.append(fn(k))
        except (TypeError, ZeroDivisionError):
            vals.append(None)
    ratios[p][name] = vals
    return vals

print()
print(f"alone, per path ({M}figures; device reads/s and MiB/s from /sys/block/loopN/stat over the run's wall time, fio's start included):")
rows = [["path", "4k QD4 alone IOPS", "device r/s", "1M QD4 alone MiB/s", "device MiB/s"]]
for p in paths:
    rows.append([p, rate(med(get(k, "alone4k", p, "1001") for k in RS), "1001"),
                 f(med(dev.get((k, "alone4k", p), (None,))[0] for k in RS), 0),
                 rate(med(get(k, "alone1m", p, "1003") for k in RS), "1003"),
                 f(med(dev.get((k, "alone1m", p), (None, None))[1] for k in RS), 1)])
table(rows)

def case_table(title, cs, keys, ratio_name, ratio_fn, extra=()):
    print()
    print(title)
    head = ["path"]
    for key, label in keys:
        head += [f"{label} {unit(key)}", "share"]
    head += [ratio_name] + [e[0] for e in extra] + ["device MiB/s", "use (sum)"]
    if multi:
        head.append(ratio_name + " by round")
    rows = [head]
    for p in paths:
        row = [p]
        for key, _ in keys:
            row += [rate(med(get(k, cs, p, key) for k in RS), key), f(med(share(k, cs, p, key) for k in RS))]
        rr = ratio_rounds(p, ratio_name, ratio_fn(p))
        row.append(f(med(rr)))
        for name, fn in extra:
            row.append(f(med(ratio_rounds(p, name, fn(p)))))
        row.append(f(med(dev.get((k, cs, p), (None, None))[1] for k in RS), 1))
        use = []
        for k in RS:
            s = [share(k, cs, p, key) for key, _ in keys]
            use.append(sum(s) if None not in s else None)
        row.append(f(med(use)))
        if multi:
            row.append(by_round(rr))
        rows.append(row)
    table(rows)

case_table("(a) two 4k random readers, weights 200 (a1) and 100 (a2); target a1/a2 share 2.00 +-5%", "a",
           [("1001", "a1 w200"), ("1002", "a2 w100")], "a1/a2 share",
           lambda p: lambda k: share(k, "a", p, "1001") / share(k, "a", p, "1002"))
case_table("(b) a 1M sequential reader (b1) and a 4k random reader (b2), weights 200 and 200; target b1/b2 share 1.00 +-10%", "b",
           [("1003", "b1 1M"), ("1004", "b2 4k")], "b1/b2 share",
           lambda p: lambda k: share(k, "b", p, "1003") / share(k, "b", p, "1004"))
# (c): c1's second half against its rate alone with no policy on that path.
NOPOL = {"sluice-policy": "sluice"}
def nopolicy_alone(k, p):
    q = NOPOL.get(p, p)
    v = get(k, "alone4k", q, "1001")
    return v if v is not None else get(k, "alone4k", p, "1001")

print()
print(f"(c) work conservation: c1 (4k, weight 100) the whole run, c2 (4k, weight 200) the first {half}s; "
      "target c1's second half (from a second after c2 stops) / its rate alone with no policy >= 0.95")
head = ["path", "c1 1st half IOPS", "c2 IOPS", "c1 2nd half IOPS", "alone, no policy", "2nd half / alone"]
if multi:
    head.append("by round")
rows = [head]
for p in paths:
    rr = ratio_rounds(p, "c1 2nd half / alone", lambda k: get(k, "c", p, "1005h2") / nopolicy_alone(k, p))
    row = [p + (" (alone: sluice)" if p in NOPOL and "sluice" in paths else ""),
           rate(med(get(k, "c", p, "1005h1") for k in RS), "1005"),
           rate(med(get(k, "c", p, "1006") for k in RS), "1006"),
           rate(med(get(k, "c", p, "1005h2") for k in RS), "1005"),
           rate(med(nopolicy_alone(k, p) for k in RS), "1001"), f(med(rr))]
    if multi:
        row.append(by_round(rr))
    rows.append(row)
table(rows)
case_table(f"(d) d0 1M with rbps.min={floor:.0f}MiB (weight 100), d1-d3 4k with weights 200, 300, 400; targets d0/floor 1.00 +-2%, d2/d1 1.50 and d3/d1 2.00 +-10%", "d",
           [("1007", "d0 floor"), ("1008", "d1 w200"), ("1009", "d2 w300"), ("1010", "d3 w400")], "d0/floor",
           lambda p: lambda k: get(k, "d", p, "1007") / floor,
           extra=(("d2/d1 share", lambda p: lambda k: share(k, "d", p, "1009") / share(k, "d", p, "1008")),
                  ("d3/d1 share", lambda p: lambda k: share(k, "d", p, "1010") / share(k, "d", p, "1008"))))

if failed:
    print()
    print("failed runs: " + ", ".join(f"{p} case {cs} tenant {key}" for cs, p, key in sorted(failed)))

TARGETS = [("(a) a1/a2 share", "a1/a2 share", lambda m: abs(m / 2 - 1) <= 0.05, "2.00 +-5%"),
           ("(b) b1/b2 share", "b1/b2 share", lambda m: abs(m - 1) <= 0.10, "1.00 +-10%"),
           ("(c) c1 2nd half / alone", "c1 2nd half / alone", lambda m: m >= 0.95, ">= 0.95"),
           ("(d) d0 / floor", "d0/floor", lambda m: abs(m - 1) <= 0.02, "1.00 +-2%"),
           ("(d) d2/d1 share", "d2/d1 share", lambda m: abs(m / 1.5 - 1) <= 0.10, "1.50 +-10%"),
           ("(d) d3/d1 share", "d3/d1 share", lambda m: abs(m / 2 - 1) <= 0.10, "2.00 +-10%")]
print()
print("targets" + (" (median of the per-round ratios)" if multi else "") +
      "; sluice-policy is what the targets are for, bfq the kernel's anchor, native and sluice no policy")
for p in paths:
    for label, name, ok, want in TARGETS:
        m = med(ratios[p].get(name, []))
        if p in ("sluice-policy", "bfq"):
            verdict = "-   " if m is None else ("PASS" if ok(m) else "MISS")
        else:
            verdict = "ref "
        print(f"{verdict} {p}: {label} {f(m)} (target {want})")
EOF
