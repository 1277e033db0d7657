#!/usr/bin/env bash
# Weights across hosts: do mounts of one cluster (--cluster, a real
# redis-server on this machine) divide a saturated device they share by
# their groups' weights, summed over the hosts?
#
# usage: clusterweights.sh [runtime_s=20] [hosts=3] [rounds=1]
#   env CW_IOPS (default 3000): the device's capacity, a blk-throttle
#       limit on reads and writes alike
#
# The device: one loop ext4 (its image read with O_DIRECT), slowed at the
# block layer by a cgroup v1 blkio cgroup with read_iops_device and
# write_iops_device on the loop device's MAJ:MIN, holding every sluice
# daemon (each moves itself into the cgroup before it execs), as
# bench/shares.sh does for one host: the hosts' mounts share the one
# throttled device as hosts share one NFS server. Each host is a sluice
# mount of its own process (--passthrough=false), all with the groups a
# (weight 200, uid 1001) and b (weight 100, uid 1002). Tenant a reads
# through host 0, tenant b through each of the others: one fio per host,
# 4 KiB random O_DIRECT reads at QD4, on a file of the tenant's own, for
# runtime_s after a ramp of 3 s (fio's --ramp_time: the hosts learn the
# device and find their shares). 4 KiB random reads all cost the same
# device time, so the split of device time is the split of IOPS.
#
# Runs, each round in this order:
#   apart    the mounts with the weights and no cluster: each host divides
#            only its own part of the device
#   joined   the same with --cluster: the hosts divide the device by weight
#   alone    b alone on its hosts, joined: what the device serves b
#   handover joined, a for the first half only, b the whole run, no ramp:
#            b's IOPS from 2 s after a stopped (fio's per-second log)
# Targets: joined, a's IOPS over b's summed over its hosts 2.0 within 5 %;
# a and b together at least 0.9 of b alone; after the handover, b at
# least 0.95 of b alone.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

usage="usage: clusterweights.sh [runtime_s=20] [hosts=3] [rounds=1]"
RT=${1:-20}
HOSTS=${2:-3}
ROUNDS=${3:-1}
IOPS=${CW_IOPS:-3000}
[[ $RT =~ ^[1-9][0-9]*$ ]] && ((RT >= 5)) || die "runtime_s must be a whole number of seconds >= 5 (got '$RT'); $usage"
[[ $HOSTS =~ ^[1-9][0-9]*$ ]] && ((HOSTS >= 2 && HOSTS <= 8)) || die "hosts must be 2-8 mounts (got '$HOSTS'): host 0 serves a, the others b; $usage"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "rounds must be a positive integer (got '$ROUNDS'); $usage"
[[ $IOPS =~ ^[1-9][0-9]*$ ]] && ((IOPS >= 200)) || die "CW_IOPS must be a whole number >= 200 (got '$IOPS')"
for t in redis-server setpriv; do
	command -v "$t" >/dev/null || die "'$t' not found in PATH (apt-get install redis-server util-linux)"
done
EXTRA_CLEANUP=stop_redis
start_blkio_bench

log "loop ext4 throttled to $IOPS IOPS; $HOSTS hosts, runtime ${RT}s, $ROUNDS round(s)"
make_loop_fs 1024 "$WORK/fs"
losetup --direct-io=on "$LOOP" 2>/dev/null || log "no direct I/O for $LOOP: its reads may hit the image's page cache"
DATA=$WORK/fs/data
mkdir -p "$DATA"
chmod 755 "$WORK" "$WORK/fs" "$DATA"
for u in 1001 1002; do
	write_file "$DATA/t$u" 256
	chown "$u:$u" "$DATA/t$u"
	chmod 600 "$DATA/t$u"
done
sync
set_sysfs "/sys/block/$(basename "$LOOP")/queue/rotational" 0 # 20 ms slices (bench/shares.sh)
make_cgroup "sluice-cw-disk.$$"
CGD=$CG
for k in read write; do echo "$MAJMIN $IOPS" >"$CGD/blkio.throttle.${k}_iops_device"; done
start_redis
ROWS=$WORK/rows
: >"$ROWS"
LOGS=$WORK/logs # fio's logs, written as the tenants' uids
mkdir -p "$LOGS"
chmod 1777 "$LOGS"

# mount_hosts CLUSTER(0|1): the hosts' mounts, daemons in the cgroup.
MNTS=()
mount_hosts() {
	local i cl=()
	MNTS=()
	for ((i = 0; i < HOSTS; i++)); do
		[ "$1" = 1 ] && cl=(--cluster "$REDIS_URL" --cluster-name cw --cluster-host "h$i")
		# shellcheck disable=SC2016 # $$, $0 and $@ belong to the inner bash
		start_fuse "$WORK/h$i.log" "$WORK/m$i" bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CGD" \
			"$SLUICE" mount --passthrough=false --group "a uid=1001" --group "b uid=1002" \
			--limit "a weight=200" --limit "b weight=100" "${cl[@]}" "$DATA" "$WORK/m$i"
		MNTS+=("$WORK/m$i")
	done
}

unmount_hosts() {
	local i
	for ((i = 0; i < HOSTS; i++)); do stop_fuse_at "$WORK/m$i"; done
}

# stop_fuse_at MOUNTPOINT: stop the daemon serving it.
stop_fuse_at() {
	local i
	for i in "${!DAEMON_MNTS[@]}"; do
		if [ "${DAEMON_MNTS[$i]}" = "$1" ]; then
			stop_daemon "${DAEMON_PIDS[$i]}" "$1"
			forget_daemon "${DAEMON_PIDS[$i]}"
			return
		fi
	done
}

# run NAME TENANTS: a's fio through host 0 (where TENANTS has a), b's
# through each other host, together; rows: round, run, tenant, IOPS.
run() {
	local name=$1 tenants=$2 i pids=() rc=0
	log "$(date +%T) round $ROUND/$ROUNDS: $name"
	drop_caches
	for ((i = 0; i < HOSTS; i++)); do
		local u=1002 t=b
		if ((i == 0)); then
			[[ $tenants == *a* ]] || continue
			u=1001 t=a
		fi
		[[ $tenants == *$t* ]] || continue
		setpriv --reuid="$u" --regid="$u" --clear-groups fio --name="$t$i" --filename="${MNTS[$i]}/t$u" --size=256M \
			--rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=4 --ramp_time=3 --runtime="$RT" --time_based \
			--output-format=json >"$WORK/$name.$i.json" 2>"$WORK/$name.$i.err" &
		pids+=($!)
	done
	# Halfway, what hosts 0 and 1 say of the device and the cluster.
	sleep $((RT / 2 + 3))
	for i in 0 1; do
		"$SLUICE" stat "${MNTS[$i]}" 2>&1 | grep -iE 'device|  dev |saturat' | sed "s/^/#   $name, host $i: /" >&2 || true
	done
	for i in "${pids[@]}"; do wait "$i" || rc=1; done
	[ "$rc" = 0 ] || echo "warning: $name: a fio failed: $(cat "$WORK/$name".*.err | tail -n 3 | tr '\n' ' ')" >&2
	python3 - "$WORK" "$name" "$ROUND" "$HOSTS" >>"$ROWS" <<'EOF'
import json, os, sys
work, name, rnd, hosts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
got = {}
for i in range(hosts):
    p = f"{work}/{name}.{i}.json"
    if not os.path.exists(p) or os.path.getsize(p) == 0:
        continue
    text = open(p).read()
    r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
    t = "a" if i == 0 else "b"
    got[t] = got.get(t, 0) + r["iops"]
for t, v in sorted(got.items()):
    print(f"{rnd}\t{name}\t{t}\t{v:.1f}")
EOF
}

# handover: a through host 0 for the first half only, b through the
# others the whole run, with no ramp; rows: b's IOPS summed over its hosts
# from 2 s after a stopped to the end ("handover b").
handover() {
	local i pids=() half=$((RT / 2))
	log "$(date +%T) round $ROUND/$ROUNDS: handover (a stops at ${half}s)"
	drop_caches
	rm -f "$LOGS"/handover.*
	for ((i = 0; i < HOSTS; i++)); do
		local u=1002 t=b secs=$RT
		((i == 0)) && u=1001 t=a secs=$half
		setpriv --reuid="$u" --regid="$u" --clear-groups fio --name="$t$i" --filename="${MNTS[$i]}/t$u" --size=256M \
			--rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=4 --runtime="$secs" --time_based \
			--write_iops_log="$LOGS/handover.$i" --log_avg_msec=1000 >/dev/null 2>"$WORK/handover.$i.err" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || echo "warning: handover: a fio failed" >&2; done
	python3 - "$LOGS" "$ROUND" "$HOSTS" "$half" "$RT" >>"$ROWS" <<'EOF'
import glob, sys
work, rnd, hosts, half, rt = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
per = {}
for i in range(1, hosts):
    for f in glob.glob(f"{work}/handover.{i}_iops*.log"):
        for line in open(f):
            p = [x.strip() for x in line.split(",")]
            if len(p) >= 3 and p[2] == "0":
                s = round(int(p[0]) / 1000)
                per[s] = per.get(s, 0) + float(p[1])
# Each point is the mean of the second before it: from 2 s after a stopped
# to the last whole second (fio's last point is of a part of one).
xs = [v for s, v in per.items() if half + 3 <= s <= rt - 1]
print("# handover, round " + rnd + ": b's IOPS each second: " + " ".join(f"{per[s]:.0f}" for s in sorted(per)), file=sys.stderr)
if xs:
    print(f"{rnd}\thandover\tb\t{sum(xs) / len(xs):.1f}")
EOF
}

for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
	mount_hosts 0
	run apart ab
	unmount_hosts
	mount_hosts 1
	run joined ab
	run alone b
	handover
	unmount_hosts
done

python3 - "$ROWS" "$IOPS" <<'EOF'
import statistics, sys
rows, iops = sys.argv[1], int(sys.argv[2])
d = {}
for line in open(rows):
    rnd, run, t, v = line.split()
    d.setdefault((run, t), []).append(float(v))
med = lambda k: statistics.median(d[k]) if k in d else float("nan")
print(f"{'run':8} {'a IOPS':>8} {'b IOPS':>8} {'a : b':>7} {'a+b / b alone':>14}")
alone = med(("alone", "b"))
for run in ("apart", "joined"):
    a, b = med((run, "a")), med((run, "b"))
    print(f"{run:8} {a:8.0f} {b:8.0f} {a / b:7.2f} {(a + b) / alone:14.3f}")
print(f"{'alone':8} {'':8} {alone:8.0f} {'':7} {'':>14}   (the throttle: {iops} IOPS)")
if ("handover", "b") in d:
    print(f"handover, b / b alone by round: {' '.join(f'{v / alone:.3f}' for v in d[('handover', 'b')])}")
for run in ("apart", "joined"):
    if (run, "a") in d and (run, "b") in d:
        rs = [f"{a / b:.2f}" for a, b in zip(d[(run, "a")], d[(run, "b")])]
        print(f"{run} a : b by round: {' '.join(rs)}")
hand = med(("handover", "b"))
print(f"handover: b from 2 s after a stopped {hand:.0f} IOPS, {hand / alone:.3f} of b alone")
ratio = med(("joined", "a")) / med(("joined", "b"))
util = (med(("joined", "a")) + med(("joined", "b"))) / alone
ok = abs(ratio / 2 - 1) <= 0.05 and util >= 0.9 and hand / alone >= 0.95
print(f"target: joined a : b 2.0 within 5 %, a+b at least 0.9 of b alone, and b after a stopped at least 0.95 of b alone: {'met' if ok else 'NOT met'} ({ratio:.3f}, {util:.3f}, {hand / alone:.3f})")
EOF
