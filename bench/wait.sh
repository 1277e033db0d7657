#!/usr/bin/env bash
# What does a throttled read cost sluice in CPU, against the same reads
# arriving at the same rate with no limit, against full speed, and
# against the floor: a minimal Go FUSE server answering the same reads?
#
# usage: wait.sh [runtime_s=10] [rounds=3]
#
# Workload: fio, as uid 1001, sequential 4 KiB buffered reads (psync), one
# job or eight, each job on a file of its own; every open is served with
# direct I/O, so every read() is one FUSE request. Backing files are in
# the page cache (read once first): what is measured is the request path,
# not a disk. Cases:
#   throttled  sluice, the group limited to 1 MiB/s (1 job) or 8 MiB/s
#              (8 jobs): 256 reads a second per job, each waiting its turn
#   paced      sluice, a limit the reads never reach (riops=10000000,
#              --cache-mode direct), fio itself pacing each job to 256
#              reads a second (--rate_iops): the same requests at the same
#              rate, none of them waiting in sluice
#   full       sluice under that unreached limit, fio unpaced
#   floor      bench/fuseuring -transport dev (read(2) and writev(2) on
#              /dev/fuse, pread(2) of its backing file, nothing else),
#              paced by fio as above, and unpaced
#   uring      the same minimal server over FUSE-over-io_uring (Linux
#              6.14+; skipped where /sys/module/fuse/parameters/enable_uring
#              is missing or cannot be set), paced and unpaced: what the
#              floor would be with that transport
# The sluice cases run with --transport dev, and again with --transport
# uring (throttled-uring, paced-uring, full-uring) where io_uring is
# there.
# CPU: utime+stime of the server (/proc/PID/stat) over the fio run,
# divided by the reads fio completed; switches: the context switches of
# all the server's threads (/proc/PID/task/*/status) over the run, per read,
# each one a sleep and a wake-up of a thread. Rounds alternate the cases, each on
# a fresh mount, so drift on the machine affects all alike; the summary
# shows medians and the ratios that answer the question.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-10}
ROUNDS=${2:-3}
[[ $RT =~ ^[1-9][0-9]*$ ]] || die "runtime_s must be a positive integer (got '$RT'); usage: wait.sh [runtime_s] [rounds]"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "rounds must be a positive integer (got '$ROUNDS'); usage: wait.sh [runtime_s] [rounds]"
FIO_UID=1001
RATE=256 # reads a second per job: 1 MiB/s of 4 KiB reads

require_env
setup_traps
make_workdir
chmod 711 "$WORK"
mkdir -p "$WORK/bin"
FUSEURING=$WORK/bin/fuseuring
go_build "$FUSEURING" ./bench/fuseuring || die "cannot build ./bench/fuseuring"
build_sluice
[ -n "$SLUICE" ] || die "sluice does not build"

SRC=$WORK/src
mkdir -p "$SRC"
log "8 files of 64 MiB of random data in $SRC"
for i in 1 2 3 4 5 6 7 8; do
	dd if=/dev/urandom of="$SRC/f$i" bs=1M count=64 status=none
	chmod 644 "$SRC/f$i"
done
chmod 755 "$SRC"
cat "$SRC"/f* >/dev/null
MNT=$WORK/mnt
mkdir -p "$MNT"
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING=
if [ -e "$URING_PARAM" ] && set_sysfs "$URING_PARAM" Y; then
	URING=1
else
	log "no FUSE-over-io_uring here ($URING_PARAM missing or read-only): the uring cases are skipped"
fi

# switches PID: context switches of all of PID's threads so far (those of
# threads that have exited are not counted; the servers keep theirs).
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { s += $2 } END { print s + 0 }'; }

RAW=$WORK/raw.tsv
: >"$RAW"

# run CASE JOBS ROUND PATHS...: one fio run against FUSE_PID's mount, one
# job per path; CASE paced or floor-paced adds --rate_iops.
run() {
	local cs=$1 jobs=$2 round=$3 out=$WORK/$1-$2-$3.json t0 t1 s0 s1 p
	shift 3
	local args=(--rw=read --bs=4k --ioengine=psync --runtime="$RT" --time_based
		--fadvise_hint=0 --group_reporting --output-format=json)
	[[ $cs == *paced* ]] && args+=(--rate_iops="$RATE")
	for p in "$@"; do
		args+=(--name="j$p" --filename="$p")
	done
	t0=$(cpu_ticks "$FUSE_PID")
	s0=$(switches "$FUSE_PID")
	bg_wait timeout -k 10 $((RT + 60)) setpriv --reuid=$FIO_UID --regid=$FIO_UID --clear-groups \
		fio "${args[@]}" >"$out" 2>"$out.err" || {
		cat "$out.err" >&2
		die "fio failed or timed out ($cs, $jobs jobs, round $round)"
	}
	t1=$(cpu_ticks "$FUSE_PID")
	s1=$(switches "$FUSE_PID")
	python3 - "$out" "$cs" "$jobs" "$round" $((t1 - t0)) "$RT" $((s1 - s0)) >>"$RAW" <<'EOF'
import json, os, sys
out, cs, jobs, rnd, ticks, rt, sw = sys.argv[1:8]
text = open(out).read()
r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
ios = max(r["total_ios"], 1)
cpu_s = int(ticks) / os.sysconf("SC_CLK_TCK")
mib = r["io_bytes"] / (r["runtime"] / 1000) / 2**20 if r["runtime"] else 0.0
print(f"{cs}\t{jobs}\t{rnd}\t{mib:.2f}\t{cpu_s / ios * 1e6:.1f}\t{cpu_s / int(rt) * 100:.2f}\t{int(sw) / ios:.2f}")
EOF
	log "$(tail -n 1 "$RAW" | awk -F'\t' '{ printf "%s, %s jobs, round %s: %s MiB/s, %s us CPU/read, %s%% of a core, %s switches/read", $1, $2, $3, $4, $5, $6, $7 }')"
}

one=("$MNT/f1")
eight=()
for i in 1 2 3 4 5 6 7 8; do eight+=("$MNT/f$i"); done
floor8=()
for i in 1 2 3 4 5 6 7 8; do floor8+=("$MNT/f"); done

TRANSPORTS=dev
[ -n "$URING" ] && TRANSPORTS="dev uring"
for ((round = 1; round <= ROUNDS; round++)); do
	for tr in $TRANSPORTS; do
		sfx=
		[ "$tr" = uring ] && sfx=-uring
		sluice_mount "$WORK/s.log" "$SRC" "$MNT" --transport "$tr" --group "t uid=$FIO_UID" --limit "t rbps=1MiB"
		run "throttled$sfx" 1 "$round" "${one[@]}"
		stop_fuse
		sluice_mount "$WORK/s.log" "$SRC" "$MNT" --transport "$tr" --group "t uid=$FIO_UID" --limit "t rbps=8MiB"
		run "throttled$sfx" 8 "$round" "${eight[@]}"
		stop_fuse
		sluice_mount "$WORK/s.log" "$SRC" "$MNT" --transport "$tr" --group "t uid=$FIO_UID" --limit "t riops=10000000" --cache-mode direct
		run "paced$sfx" 1 "$round" "${one[@]}"
		run "paced$sfx" 8 "$round" "${eight[@]}"
		run "full$sfx" 1 "$round" "${one[@]}"
		stop_fuse
	done
	start_fuseuring "$WORK/floor.log" "$MNT" -transport dev -backing "$SRC/f1" || die "the minimal FUSE server did not start"
	run floor-paced 1 "$round" "$MNT/f"
	run floor-paced 8 "$round" "${floor8[@]}"
	run floor-full 1 "$round" "$MNT/f"
	stop_fuse
	if [ -n "$URING" ]; then
		start_fuseuring "$WORK/uring.log" "$MNT" -transport uring -backing "$SRC/f1" || die "the minimal FUSE server did not start over io_uring"
		run uring-paced 1 "$round" "$MNT/f"
		run uring-paced 8 "$round" "${floor8[@]}"
		run uring-full 1 "$round" "$MNT/f"
		stop_fuse
	fi
done

echo
echo "sequential 4 KiB reads, every read() a FUSE request, ${RT}s per run, $ROUNDS rounds, $RATE reads/s per job when paced or throttled; $(nproc) CPUs, $(uname -r)"
echo "CPU = utime+stime of the FUSE server / reads completed"
ROWS=$WORK/rows.tsv
printf 'case\tjobs\tround\tMiB/s\tCPU us/read\tcore %%\tswitches/read\n' >"$ROWS"
cat "$RAW" >>"$ROWS"
echo
print_table "$ROWS"
echo
python3 - "$RAW" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
for cs, jobs, _, mib, cpu, core, sw in rows:
    med.setdefault((cs, jobs), []).append((float(mib), float(cpu), float(core), float(sw)))
m = {k: tuple(statistics.median(x[i] for x in v) for i in range(4)) for k, v in med.items()}
w = max(len(f"{cs}, {jobs} job(s)") for cs, jobs in m)
print(f"{'median':<{w}} | MiB/s | CPU us/read | core % | switches/read")
for (cs, jobs), (mib, cpu, core, sw) in m.items():
    print(f"{cs + ', ' + jobs + ' job(s)':<{w}} | {mib:5.2f} | {cpu:11.1f} | {core:6.2f} | {sw:13.2f}")
print()
def ratio(a, b, what):
    if a in m and b in m and m[b][1]:
        print(f"{what}: {m[a][1] / m[b][1]:.2f}x")
ratio(("throttled", "1"), ("paced", "1"), "throttled / paced at the same rate, 1 job")
ratio(("throttled", "8"), ("paced", "8"), "throttled / paced at the same rate, 8 jobs")
ratio(("throttled", "1"), ("full", "1"), "throttled, 1 job / full speed")
ratio(("throttled", "8"), ("full", "1"), "throttled, 8 jobs / full speed")
ratio(("paced", "1"), ("full", "1"), "sluice paced / full speed (what the rate alone costs)")
ratio(("floor-paced", "1"), ("floor-full", "1"), "floor paced / full speed (the same for a minimal server)")
ratio(("paced", "1"), ("floor-paced", "1"), "sluice / floor, paced, 1 job")
ratio(("paced", "8"), ("floor-paced", "8"), "sluice / floor, paced, 8 jobs")
ratio(("uring-paced", "1"), ("floor-paced", "1"), "floor over io_uring / over /dev/fuse, paced, 1 job")
ratio(("uring-paced", "8"), ("floor-paced", "8"), "floor over io_uring / over /dev/fuse, paced, 8 jobs")
for cs, jobs in (("throttled", "1"), ("throttled", "8"), ("paced", "1"), ("paced", "8"), ("full", "1")):
    ratio((cs + "-uring", jobs), (cs, jobs), f"sluice --transport uring / dev, {cs}, {jobs} job(s)")
EOF
