#!/usr/bin/env bash
# A limited group's writes through --write-cache. With --cache-mode kernel
# and a write limit that writes back the mount's dirty bound within 100 ms
# (640 MiB/s for the default 64 MiB), the kernel's page cache takes the
# group's write()s and sluice paces their writeback; with auto, each of
# its write()s is paced as it comes. What each gives the group, and what
# it costs an unlimited writer beside it.
#
# usage: writecache.sh [runtime_s=10] [limit_mib=640] [rounds=3]
#
# Sluice mounts over a loop ext4, --write-cache, group t (uid 1002) at
# wbps=LIMIT, uid 1001 unlimited. fio sequential buffered writes,
# time-based, each ending with an fsync that is timed with them:
#   u alone     uid 1001, 4 KiB writes
#   t alone     uid 1002, 1 MiB writes, under auto and under kernel
#   u beside t  both at once, under auto and under kernel
#   u beside v  uid 1001 beside an unlimited writer of 1 MiB (uid 1003):
#               what sharing the machine costs u without a limit
# Reported per run and writer: MiB/s over the run including the final
# fsync, achieved/limit for t, the final fsync's time (fio's job runtime
# past runtime_s), the longest write().
# Rounds alternate the runs; the medians are printed last.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-10}
LIMIT=${2:-640}
ROUNDS=${3:-3}
[[ $RT =~ ^[1-9][0-9]*$ ]] || die "runtime_s must be a whole number of seconds (got '$RT'); usage: writecache.sh [runtime_s] [limit_mib] [rounds]"
check_limits "$LIMIT"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "rounds must be a whole number (got '$ROUNDS')"

require_env
setup_traps
make_workdir
build_sluice
[ -n "$SLUICE" ] || die "sluice did not build"

make_loop_fs 4096 "$WORK/fs"
DATA=$WORK/fs/data
mkdir -p "$DATA" "$WORK/mnt"
chmod 777 "$DATA"
chmod 755 "$WORK" "$WORK/fs"

ROWS=$WORK/rows
: >"$ROWS"

# writer UID NAME BS OUT: fio as UID writing NAME through the mount in
# blocks of BS for RT seconds, then fsync; OUT gets fio's JSON, OUT.t the
# wall time of the whole (writes and fsync).
writer() {
	local uid=$1 name=$2 bs=$3 out=$4 t0 t1
	t0=$(date +%s.%N)
	setpriv --reuid="$uid" --regid="$uid" --clear-groups fio --output-format=json --name="$name" \
		--filename="$WORK/mnt/$name" --rw=write --bs="$bs" --size=1G --ioengine=psync \
		--runtime="$RT" --time_based --end_fsync=1 >"$out" 2>"$out.err" ||
		{ cat "$out.err" >&2; return 1; }
	t1=$(date +%s.%N)
	echo "$t0 $t1" >"$out.t"
}

# row RUN WHO LIMIT|- OUT: one table row from a writer's result.
row() {
	python3 - "$@" "$RT" >>"$ROWS" <<'EOF'
import json, sys
run, who, limit, out, rt = sys.argv[1:6]
text = open(out).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
w = job["write"]
t0, t1 = map(float, open(out + ".t").read().split())
mib = w["io_bytes"] / 2**20 / (t1 - t0)
ratio = f"{mib / int(limit):.3f}" if limit != "-" else "-"
past = job["job_runtime"] - int(rt) * 1000
print(f"{run}\t{who}\t{mib:.1f}\t{ratio}\t{past:.0f}\t{w['clat_ns']['max'] / 1e6:.1f}")
EOF
}

# run NAME MODE: one run on a fresh mount with --cache-mode MODE.
run() {
	local name=$1 mode=$2 pids=()
	rm -f "$DATA"/*
	drop_caches
	sluice_mount "$WORK/sluice.log" "$DATA" "$WORK/mnt" --write-cache --cache-mode "$mode" \
		--group 'u uid=1001' --group 't uid=1002' --limit "t wbps=${LIMIT}MiB"
	case $name in
	u) writer 1001 u 4k "$WORK/u.json" || die "fio as uid 1001 failed" ;;
	t) writer 1002 t 1M "$WORK/t.json" || die "fio as uid 1002 failed" ;;
	ut | uv)
		if [ "$name" = ut ]; then
			writer 1002 t 1M "$WORK/t.json" &
		else
			writer 1003 v 1M "$WORK/v.json" &
		fi
		pids+=($!)
		writer 1001 u 4k "$WORK/u.json" &
		pids+=($!)
		for p in "${pids[@]}"; do wait "$p" || die "a writer failed"; done
		;;
	esac
	stop_fuse
	case $name in
	u) row "u alone" "uid 1001, unlimited, 4 KiB" - "$WORK/u.json" ;;
	t) row "t alone, $mode" "uid 1002, wbps=${LIMIT}MiB, 1 MiB" "$LIMIT" "$WORK/t.json" ;;
	ut)
		row "u beside t, $mode" "uid 1001, unlimited, 4 KiB" - "$WORK/u.json"
		row "u beside t, $mode" "uid 1002, wbps=${LIMIT}MiB, 1 MiB" "$LIMIT" "$WORK/t.json"
		;;
	uv)
		row "u beside v" "uid 1001, unlimited, 4 KiB" - "$WORK/u.json"
		row "u beside v" "uid 1003, unlimited, 1 MiB" - "$WORK/v.json"
		;;
	esac
}

for ((r = 1; r <= ROUNDS; r++)); do
	for run in "u auto" "t auto" "t kernel" "ut auto" "ut kernel" "uv auto"; do
		log "round $r: $run"
		# shellcheck disable=SC2086 # name and mode
		run $run
	done
done

echo
echo "sluice --write-cache --cache-mode auto or kernel, group t at wbps=${LIMIT}MiB; fio sequential buffered writes, ${RT}s then fsync; medians of $ROUNDS rounds"
python3 - "$ROWS" >"$WORK/table" <<'EOF'
import statistics, sys
rows = {}
for l in open(sys.argv[1]):
    f = l.rstrip("\n").split("\t")
    rows.setdefault((f[0], f[1]), []).append(f[2:])
print("run\twriter\tMiB/s\tachieved/limit\tfinal fsync ms\twrite() max ms")
for (run, who), vals in rows.items():
    cols = []
    for i in range(4):
        xs = [v[i] for v in vals]
        cols.append("-" if xs[0] == "-" else f"{statistics.median(map(float, xs)):.{[1, 3, 0, 1][i]}f}")
    print("\t".join([run, who] + cols))
EOF
print_table "$WORK/table"
