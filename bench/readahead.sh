#!/usr/bin/env bash
# Precision and latency of a read-bandwidth limit under buffered
# sequential 4k reads, the kernel and sluice side by side in one run.
#
# usage: readahead.sh [runtime_s=20] [limits_mib="1 10 30"]
#
# For each limit L (MiB/s), three paths read the same file on the same loop
# ext4, caches dropped before each:
#   kernel      cgroup v1 blkio.throttle.read_bps_device = L on the loop
#               device, fio runs inside the cgroup
#   sluice-on   sluice over the file's directory, --limit "default rbps=L"
#               --readahead-budget on
#   sluice-off  same, --readahead-budget off
# fio job: --rw=read --bs=4k --direct=0 --numjobs=1 --time_based.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-20}
LIMITS=${2:-"1 10 30"}
if ! [[ $RT =~ ^[1-9][0-9]*$ ]]; then die "runtime_s must be a positive integer (got '$RT')"; fi
check_limits "$LIMITS"

start_blkio_bench

# The file must outlast the fastest run: largest limit x runtime, plus 25 %.
MAXL=0
for l in $LIMITS; do ((l > MAXL)) && MAXL=$l; done
FILE_MIB=$((MAXL * RT * 5 / 4 + 64))
IMG_MIB=$((FILE_MIB + FILE_MIB / 10 + 320))
log "loop ext4 of ${IMG_MIB} MiB, test file ${FILE_MIB} MiB, runtime ${RT}s, limits: $LIMITS MiB/s"
make_loop_fs "$IMG_MIB" "$WORK/fs"
log "$LOOPNAME: read_ahead_kb=$(cat "/sys/block/$LOOPNAME/queue/read_ahead_kb")" \
	"max_sectors_kb=$(cat "/sys/block/$LOOPNAME/queue/max_sectors_kb") (kernel defaults)"
DATA=$WORK/fs/data
mkdir -p "$DATA"
write_file "$DATA/f" "$FILE_MIB"
make_cgroup "sluice-bench-ra.$$"

FIO_JOB=(--name=ra --rw=read --bs=4k --direct=0 --numjobs=1 --ioengine=psync
	--runtime="$RT" --time_based --size="${FILE_MIB}M")

ROWS=$WORK/rows
: >"$ROWS"

# row LIMIT PATH JSON: append one table row from a fio result.
row() {
	python3 - "$1" "$2" "$3" >>"$ROWS" <<'EOF'
import json, sys
limit, path, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(out) as f:
    text = f.read()
r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
mib = r["io_bytes"] / (r["runtime"] / 1000) / 2**20 if r["runtime"] else 0.0
c = r["clat_ns"]
p99 = c.get("percentile", {}).get("99.000000", 0)
print(f"{limit} MiB/s\t{path}\t{mib:.3f}\t{mib / limit:.3f}\t{c['max'] / 1e6:.1f}\t{c['stddev'] / 1e6:.2f}\t{p99 / 1e6:.3f}")
EOF
}

# ra_row LIMIT BUDGET STAT.json: readahead counters of the default group.
RAROWS=$WORK/rarows
: >"$RAROWS"
ra_row() {
	python3 - "$@" >>"$RAROWS" <<'EOF'
import json, sys
limit, budget, path = sys.argv[1:4]
g = next(g for g in json.load(open(path))["groups"] if g["group"] == "default")
mib = lambda k: f"{g.get(k, 0) / 2**20:.1f}"
print(f"{limit} MiB/s\tbudget {budget}\t{mib('app_rbytes')}\t{mib('rbytes')}\t{g.get('rios', 0)}"
      f"\t{mib('ra_issued')}\t{mib('ra_used')}\t{mib('ra_wasted')}\t{g.get('throttled_ns', 0) / 1e9:.1f}")
EOF
}

for L in $LIMITS; do
	bps=$((L * 1048576))

	log "limit ${L} MiB/s: kernel blk-throttle"
	echo "$MAJMIN $bps" >"$CG/blkio.throttle.read_bps_device"
	drop_caches
	in_cgroup "$CG" fio --output-format=json --output="$WORK/k$L.json" \
		--filename="$DATA/f" "${FIO_JOB[@]}" 2>"$WORK/k$L.err" ||
		{ cat "$WORK/k$L.err" >&2; die "fio (kernel, ${L} MiB/s) failed"; }
	echo "$MAJMIN 0" >"$CG/blkio.throttle.read_bps_device"
	row "$L" kernel "$WORK/k$L.json"

	for budget in on off; do
		if [ -z "$SLUICE" ]; then
			printf '%s MiB/s\tsluice-%s\t(sluice did not build)\n' "$L" "$budget" >>"$ROWS"
			continue
		fi
		log "limit ${L} MiB/s: sluice, readahead budget $budget"
		sluice_mount "$WORK/sluice-$L-$budget.log" "$DATA" "$WORK/mnt" \
			--limit "default rbps=${L}MiB" --readahead-budget "$budget"
		drop_caches
		fio_json "$WORK/s$L$budget.json" --filename="$WORK/mnt/f" "${FIO_JOB[@]}" ||
			die "fio (sluice, ${L} MiB/s, budget $budget) failed"
		if sluice_stat "$WORK/mnt" "$WORK/s$L$budget.stat"; then
			ra_row "$L" "$budget" "$WORK/s$L$budget.stat"
		fi
		stop_fuse
		row "$L" "sluice-$budget" "$WORK/s$L$budget.json"
	done
done

echo
echo "buffered sequential 4k reads under a read bandwidth limit (fio, 1 job, ${RT}s, same file)"
{
	printf 'limit\tpath\tachieved MiB/s\tratio\tclat max ms\tstdev ms\tp99 ms\n'
	cat "$ROWS"
} >"$WORK/table"
print_table "$WORK/table"
if [ -s "$RAROWS" ]; then
	echo
	echo "sluice counters (default group, whole mount lifetime)"
	{
		printf 'limit\tmode\tapp MiB\tdevice MiB\tdevice ios\tra issued MiB\tra used MiB\tra wasted MiB\tthrottled s\n'
		cat "$RAROWS"
	} >"$WORK/ratable"
	print_table "$WORK/ratable"
fi
cat <<'EOF'

targets: ratio 0.99-1.01 at every limit; clat max <= 50 ms at 1 MiB/s and
<= 20 ms at 10 MiB/s; sluice-on no worse than sluice-off.
kernel figures measured on a 2-core VM like this one: 1 MiB/s -> ratio 0.76, max 5.00 s; 10 MiB/s -> 0.99, max 0.52 s.
EOF
