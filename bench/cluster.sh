#!/usr/bin/env bash
# Limits across hosts: do mounts of one cluster (--cluster, a real
# redis-server on this machine) hold a group's cap summed over them while
# the demand moves between them, with Redis slow, and with Redis stopped?
#
# usage: cluster.sh [phase_s=4] [hosts="2 4 8"] [rates_mib="10 100"]
#   env CLUSTER_NETEM_MS (default 5): delay added each way on the Redis
#       link for the delayed run (bench/delayproxy.py, a TCP proxy in front
#       of the server's socket that holds every byte this long, as tc
#       netem's delay would, with no need of sch_netem in the kernel); 0
#       skips that run
#   env CLUSTER_OUTAGE_S (default 10): how long Redis is stopped
#   env CLUSTER_ROUNDS (default 3): rounds of the latency runs
#   env CLUSTER_RUNS (default "moving delayed outage latency"): the runs
#
# Each host is a sluice mount of its own process and mount point over one
# SOURCE directory of sparse files (reads of holes: the throttle, not the
# disk, is what binds), all with --cache-mode direct and the same group
# "builds" with a cap of rbps=RATE MiB/s, each host's rule placing a uid of
# its own in it (uid 4300+i). Each host's reader is one fio (64 KiB
# O_DIRECT sequential reads, QD1) as that uid, whose jobs read in the
# phases where the host is busy. The aggregate is sampled every second
# from the hosts' /metrics (sluice_app_bytes_total: what the readers got),
# and each phase's total from fio's own bytes.
#
# Runs:
#   moving   for each count of hosts and rate: 5 phases of phase_s: all
#            hosts read; the first half; the second half; host 0 alone;
#            all again. Redis on a Unix socket.
#   delayed  4 hosts at the largest rate, the same phases, Redis over TCP
#            through the delaying proxy, CLUSTER_NETEM_MS each way.
#   outage   4 hosts at the largest rate, host 0 paced by fio at a tenth of
#            the cap, the others all they can; Redis killed 5 s in and
#            started afresh (nothing kept) CLUSTER_OUTAGE_S later; 5 s more.
#   latency  one host, the group's cap at the largest rate and at 10 GiB/s
#            (never reached), with and without --cluster, rounds rotated:
#            fio's median read and MiB/s.
# Targets (issue "one budget across hosts"):
#   moving, delayed: each phase's mean second 0.98-1.02 of the cap (fio's
#     own bytes over the phase are shown beside: each fio counts its own
#     4 s, started a few ms apart from the others'); the settled seconds
#     (not the first after a change) within 0.98-1.02;
#     lease requests <= 20 a second per host
#   outage: no read longer than a lease (1 s) and a tenth (a host holding
#     a lease of next to nothing when Redis stops waits for its end, then
#     reads at its fallback); no second above 1.0x the cap
#     while Redis is down (the fallback: cap / hosts seen); from 2 s after
#     Redis is back, 0.98-1.02, and no second above 1.05
#   latency: the median read with --cluster within 1 % of without
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

usage='usage: cluster.sh [phase_s=4] [hosts="2 4 8"] [rates_mib="10 100"]'
PS=${1:-4}
HOSTS=${2:-2 4 8}
RATES=${3:-10 100}
NETEM=${CLUSTER_NETEM_MS:-5}
OUTAGE=${CLUSTER_OUTAGE_S:-10}
ROUNDS=${CLUSTER_ROUNDS:-3}
ALL_RUNS="moving delayed outage latency"
RUNS=${CLUSTER_RUNS:-$ALL_RUNS}
for r in $RUNS; do
	[[ " $ALL_RUNS " == *" $r "* ]] || die "unknown run '$r' in CLUSTER_RUNS (want some of: $ALL_RUNS)"
done
want() { [[ " $RUNS " == *" $1 "* ]]; }
[[ $PS =~ ^[1-9][0-9]*$ ]] && ((PS >= 3)) || die "phase_s must be a whole number of seconds >= 3 (got '$PS'): a phase's first second is its settling; $usage"
for n in $HOSTS; do
	[[ $n =~ ^[1-9][0-9]*$ ]] && ((n >= 2 && n <= 16)) || die "hosts are counts of mounts, 2-16 (got '$n'); $usage"
done
check_limits "$RATES"
[[ $NETEM =~ ^[0-9]+$ ]] || die "CLUSTER_NETEM_MS must be a whole number of ms (got '$NETEM'; 0 skips the netem run)"
[[ $OUTAGE =~ ^[1-9][0-9]*$ ]] || die "CLUSTER_OUTAGE_S must be a whole number of seconds >= 1 (got '$OUTAGE')"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "CLUSTER_ROUNDS must be a positive integer (got '$ROUNDS')"
require_env
for t in redis-server setpriv; do
	command -v "$t" >/dev/null || die "'$t' not found in PATH (apt-get install redis-server util-linux)"
done
setup_traps
make_workdir
build_sluice
[ -n "$SLUICE" ] || die "sluice does not build: nothing to measure"
OPS=$PS # the phases' length; the outage and latency runs set their own
TOP=$(echo "$RATES" | tr ' ' '\n' | sort -n | tail -1)

PROXY_PID=""
# Redis and the proxy go after the mounts: a mount stopping gives its
# leases back.
stop_servers() {
	stop_redis
	[ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null
	PROXY_PID=""
}
EXTRA_CLEANUP=stop_servers

# start_proxy MS: the delaying proxy in front of the server; sets REDIS_URL
# to it.
start_proxy() {
	local port=$((PORT0 + 100)) i
	python3 "$BENCH_DIR/delayproxy.py" "$port" "$WORK/redis.sock" "$1" >"$WORK/proxy.log" 2>&1 &
	PROXY_PID=$!
	for ((i = 0; i < 100; i++)); do
		grep -q ready "$WORK/proxy.log" && break
		sleep 0.05
	done
	grep -q ready "$WORK/proxy.log" || die "the delaying proxy did not start: $(cat "$WORK/proxy.log")"
	REDIS_URL=redis://127.0.0.1:$port/0
}

PORT0=$((19300 + $$ % 500))
chmod 711 "$WORK" # the readers' uids must reach the mount points
SRC=$WORK/src
mkdir -p "$SRC"
for ((i = 0; i < 16; i++)); do truncate -s 8G "$SRC/f$i"; done

# mount_hosts N RATE_MIB [--cluster-less]: N mounts, host i at
# $WORK/m$i with metrics on 127.0.0.1:PORT0+i; sets MNT_PIDS.
mount_hosts() {
	local n=$1 rate=$2 i cl=(--cluster "$REDIS_URL" --cluster-name bench)
	[ "${3:-}" = --cluster-less ] && cl=()
	MNT_PIDS=()
	for ((i = 0; i < n; i++)); do
		sluice_mount "$WORK/mount$i.log" "$SRC" "$WORK/m$i" --cache-mode direct --metrics-listen "127.0.0.1:$((PORT0 + i))" \
			--group "builds uid=$((4300 + i))" --limit "builds rbps=${rate}MiB" ${cl[@]+"${cl[@]}"} ${cl[@]+--cluster-host "h$i"}
		MNT_PIDS+=("$FUSE_PID")
	done
}

unmount_hosts() {
	local p
	for p in "${MNT_PIDS[@]}"; do
		FUSE_PID=$p
		stop_fuse
	done
	MNT_PIDS=()
}

# run NAME N RATE_MIB PHASES [PACE0]: the readers of N mounted hosts, as
# clusterrun.py takes them; PHASES a JSON list of lists of hosts; PACE0
# paces host 0 (bytes a second). Figures in $WORK/NAME.json.
run() {
	local name=$1 n=$2 rate=$3 phases=$4 pace=${5:-0}
	python3 - "$WORK/$name.spec" "$n" "$rate" "$phases" "$pace" "$PS" "$WORK" "$PORT0" <<'EOF'
import json, sys
out, n, rate, phases, pace, ps, work, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7], int(sys.argv[8])
hosts = [{"mnt": f"{work}/m{i}", "metrics": f"127.0.0.1:{port + i}", "uid": 4300 + i, "file": f"{work}/m{i}/f{i}",
          "rate": pace if i == 0 else 0} for i in range(n)]
json.dump({"phase_s": ps, "cap": rate << 20, "phases": phases, "hosts": hosts, "group": "builds"}, open(out, "w"))
EOF
	bg_wait python3 "$BENCH_DIR/clusterrun.py" "$WORK/$name.spec" "$WORK/$name.json"
}

# moving_phases N: all; the first half; the second half; host 0; all.
moving_phases() {
	python3 -c "
n = $1; h = n // 2
print([list(range(n)), list(range(h)), list(range(h, n)), [0], list(range(n))])"
}

RESULTS=$WORK/results.tsv
: >"$RESULTS"

start_redis
if want moving; then
	log "moving demand: hosts $HOSTS, rates $RATES MiB/s, phases of $PS s"
	for n in $HOSTS; do
		for rate in $RATES; do
			mount_hosts "$n" "$rate"
			run "moving-$n-$rate" "$n" "$rate" "$(moving_phases "$n")"
			unmount_hosts
			echo "moving	$n	$rate	$WORK/moving-$n-$rate.json" >>"$RESULTS"
		done
	done
fi

if want delayed && ((NETEM > 0)); then
	log "delayed: 4 hosts at $TOP MiB/s, ${NETEM} ms each way on the Redis link"
	start_proxy "$NETEM"
	mount_hosts 4 "$TOP"
	run "delayed-4-$TOP" 4 "$TOP" "$(moving_phases 4)"
	unmount_hosts
	kill "$PROXY_PID"
	PROXY_PID=""
	echo "delayed ${NETEM}ms	4	$TOP	$WORK/delayed-4-$TOP.json" >>"$RESULTS"
fi

if want outage; then
	log "outage: 4 hosts at $TOP MiB/s, Redis stopped ${OUTAGE} s"
	start_redis
	mount_hosts 4 "$TOP"
	LEN=$((10 + OUTAGE))
	PS=$LEN
	(
		sleep 5
		stop_redis
		sleep "$OUTAGE"
		start_redis
	) &
	OUTAGE_PID=$!
	run "outage-4-$TOP" 4 "$TOP" "[[0, 1, 2, 3]]" $(((TOP << 20) / 10))
	wait "$OUTAGE_PID"
	PS=$OPS
	unmount_hosts
	echo "outage	4	$TOP	$WORK/outage-4-$TOP.json" >>"$RESULTS"
fi

if want latency; then
	log "latency: one host, with and without --cluster, $ROUNDS rounds"
	PS=$((2 * OPS))
	for ((r = 0; r < ROUNDS; r++)); do
		for cap in "$TOP" 10240; do
			for mode in cluster none; do
				if [ "$mode" = none ]; then mount_hosts 1 "$cap" --cluster-less; else mount_hosts 1 "$cap"; fi
				run "latency-$cap-$mode-$r" 1 "$cap" "[[0]]"
				unmount_hosts
				echo "latency	$mode	$cap	$WORK/latency-$cap-$mode-$r.json" >>"$RESULTS"
			done
		done
	done
	PS=$OPS
fi

python3 - "$RESULTS" "$PS" "$OUTAGE" <<'EOF'
import json, statistics, sys
sys.path.insert(0, __import__("os").path.dirname(sys.argv[0]) or ".")
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
ps, outage = int(sys.argv[2]), int(sys.argv[3])
fails = []

def check(ok, what):
    if not ok:
        fails.append(what)
    return "" if ok else "  <- MISSED"

moving = [r for r in rows if r[0] not in ("latency", "outage")]
if moving:
    print("## Moving demand (phases: all, first half, second half, host 0, all)\n")
hdr = ["run", "hosts", "MiB/s", "phases", "phases (fio)", "settled s min-max", "first s after a change", "req/s/host max", "longest read ms"]
tab = [hdr]
for kind, n, rate, path in moving:
    d = json.load(open(path))
    secs = d["seconds"]
    settled = [x for i, x in enumerate(secs) if i % ps != 0]
    # Each phase's mean second (the first phase's first second is the
    # readers starting, not demand moving).
    phases = [statistics.mean(secs[max(k * ps, 1):(k + 1) * ps]) for k in range(len(secs) // ps)]
    firsts = [secs[i] for i in range(ps, len(secs), ps)]
    trips = max(h["trips_per_s"] for h in d["hosts"])
    tag = f"{kind} {n}x{rate}"
    ok = all(0.98 <= x <= 1.02 for x in phases) and 0.98 <= min(settled) and max(settled) <= 1.02 and trips <= 20
    check(ok, tag)
    tab.append([kind, n, rate, " ".join(f"{x:.3f}" for x in phases), " ".join(f"{x:.3f}" for x in d["phases"]), f"{min(settled):.3f}-{max(settled):.3f}",
                " ".join(f"{x:.2f}" for x in firsts), f"{trips:.1f}", f"{d['max_us'] / 1e3:.0f}" + ("" if ok else "  <- MISSED")])
w = [max(len(str(r[i])) for r in tab) for i in range(len(hdr))]
for k, r in enumerate(tab if moving else []):
    print(" | ".join(str(x).rjust(w[i]) if i else str(x).ljust(w[i]) for i, x in enumerate(r)))
    if k == 0:
        print("-+-".join("-" * x for x in w))

for kind, n, rate, path in rows:
    if kind != "outage":
        continue
    d = json.load(open(path))
    s = d["seconds"]
    down = s[5:5 + outage]
    back = s[5 + outage:]
    print(f"\n## Redis stopped {outage} s ({n} hosts at {rate} MiB/s; host 0 paced at a tenth)\n")
    print("per second: " + " ".join(f"{x:.2f}" for x in s))
    print(f"longest read: {d['max_us'] / 1e3:.0f} ms" + check(d["max_us"] <= 1.1e6, "outage: a read longer than a lease and a tenth"))
    print(f"Redis down: most {max(down):.3f} of the cap in a second" + check(max(down) <= 1.0 + 0.005, "outage: above the cap while down"))
    print(f"Redis back: seconds {' '.join(f'{x:.3f}' for x in back)}; most {max(back):.3f}" + check(max(back) <= 1.05, "outage: a burst after return"))
    after = back[2:]
    if after:
        print(f"from 2 s after: {min(after):.3f}-{max(after):.3f}" + check(min(after) >= 0.98 and max(after) <= 1.02, "outage: precision after return"))

lat = {}
for kind, mode, cap, path in rows:
    if kind == "latency":
        d = json.load(open(path))
        lat.setdefault((cap, mode), []).append((d["p50_us"], d["phases"][0] * int(cap)))
if lat:
    print("\n## One host, with and without --cluster (medians of rounds)\n")
    for cap in sorted({c for c, _ in lat}, key=int):
        a, b = lat[(cap, "cluster")], lat[(cap, "none")]
        pa, pb = statistics.median(x for x, _ in a), statistics.median(x for x, _ in b)
        ra, rb = statistics.median(y for _, y in a), statistics.median(y for _, y in b)
        print(f"cap {cap} MiB/s: median read {pa:.0f} us with --cluster, {pb:.0f} us without: {pa / pb:.3f}x; "
              f"{ra:.1f} and {rb:.1f} MiB/s" + check(pa / pb <= 1.01, f"latency at cap {cap}"))
print()
print("targets: all met" if not fails else "targets missed: " + "; ".join(fails))
EOF
