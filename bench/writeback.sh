#!/usr/bin/env bash
# Seed 003: buffered writers in two groups limited to wbps each, and a sync
# from an unlimited process half-way through. Throttling at writeback (the
# kernel's blk-throttle) leaves each group's writes dirty in the page cache
# and the sync waits for all of them at the groups' rates; sluice paces at
# write() and starts writeback of what it admitted, so the sync finds
# little to wait for.
#
# usage: writeback.sh [runtime_s=30] [wbps_mib=10] [jobs=8]
#
# Two paths, same loop ext4, one run:
#   kernel  cgroup v1 blkio.throttle.write_bps_device on the loop device,
#           one cgroup per group, fio inside it
#   sluice  --group 'g1 uid=1001' --group 'g2 uid=1002' --limit 'gN wbps=..'
#           over a directory of the loop file system, fio as uids 1001, 1002
# fio job per group: --rw=write --bs=1M --size=64M --numjobs=JOBS
# --time_based --runtime=RT, buffered. The sync runs at RT/2 from root.
# Reported: each group's achieved/limit (fio's bandwidth over its runtime),
# the sync's wall time, and the system's Dirty + Writeback just before it.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-30}
WBPS_MIB=${2:-10}
J=${3:-8}
for v in "$RT" "$WBPS_MIB" "$J"; do
	[[ $v =~ ^[1-9][0-9]*$ ]] || die "arguments must be positive integers (got '$v'); usage: writeback.sh [runtime_s] [wbps_mib] [jobs]"
done
WBPS=$((WBPS_MIB << 20))

require_env
require_blkio
setup_traps
make_workdir
build_sluice

IMG_MIB=$((2 * J * 64 + 1024))
log "loop ext4 of ${IMG_MIB} MiB; 2 groups x $J writers at ${WBPS_MIB} MiB/s each; ${RT}s; sync at $((RT / 2))s"
make_loop_fs "$IMG_MIB" "$WORK/fs"

ROWS=$WORK/rows
printf 'path\tgroup\tachieved/limit\tMiB/s\tsync (s)\tdirty+writeback before sync (MiB)\n' >"$ROWS"

dirty_mib() { awk '/^(Dirty|Writeback):/ { s += $2 } END { printf "%.0f", s / 1024 }' /proc/meminfo; }

# run_case PATH DIR1 DIR2 PREFIX1 PREFIX2: the two fio groups (each
# command prefix runs fio in its group), the sync at RT/2, the rows.
run_case() {
	local path=$1 d1=$2 d2=$3 p1=$4 p2=$5 pids=() g s e dirty
	drop_caches
	for g in 1 2; do
		local d=$d1 p=$p1
		[ "$g" = 2 ] && d=$d2 p=$p2
		# shellcheck disable=SC2086 # the prefix is a command and its words
		$p fio --output-format=json --name="g$g" --directory="$d" \
			--rw=write --bs=1M --size=64M --numjobs="$J" --runtime="$RT" --time_based \
			--group_reporting >"$WORK/$path.g$g.json" 2>"$WORK/$path.g$g.err" &
		pids+=($!)
	done
	sleep $((RT / 2))
	dirty=$(dirty_mib)
	s=$(date +%s.%N)
	sync
	e=$(date +%s.%N)
	for g in "${pids[@]}"; do wait "$g" || { cat "$WORK/$path".g*.err >&2; die "fio ($path) failed"; }; done
	for g in 1 2; do
		python3 - "$path" "g$g" "$WORK/$path.g$g.json" "$WBPS" "$s" "$e" "$dirty" >>"$ROWS" <<'EOF'
import json, sys
path, grp, out, limit, s, e, dirty = sys.argv[1:8]
text = open(out).read()
w = json.loads(text[text.index("{"):])["jobs"][0]["write"]
bw = w["bw_bytes"]
print(f"{path}\t{grp}\t{bw / int(limit):.3f}\t{bw / 2**20:.1f}\t{float(e) - float(s):.2f}\t{dirty}")
EOF
	done
}

# ---- kernel
log "kernel: blkio.throttle.write_bps_device=$WBPS on $LOOPNAME, one cgroup per group"
mkdir -p "$WORK/fs/k1" "$WORK/fs/k2"
make_cgroup "sluice-bench-wb1.$$"
CG1=$CG
make_cgroup "sluice-bench-wb2.$$"
CG2=$CG
for c in "$CG1" "$CG2"; do echo "$MAJMIN $WBPS" >"$c/blkio.throttle.write_bps_device"; done
cat >"$WORK/incg" <<'EOF'
#!/bin/sh
cg=$1
shift
echo $$ >"$cg/cgroup.procs" && exec "$@"
EOF
chmod +x "$WORK/incg"
run_case kernel "$WORK/fs/k1" "$WORK/fs/k2" "$WORK/incg $CG1" "$WORK/incg $CG2"
for c in "$CG1" "$CG2"; do echo "$MAJMIN 0" >"$c/blkio.throttle.write_bps_device"; done
rm -rf "$WORK/fs/k1" "$WORK/fs/k2"
sync

# ---- sluice
if [ -z "$SLUICE" ]; then
	printf 'sluice\t(sluice did not build)\n' >>"$ROWS"
else
	mkdir -p "$WORK/fs/s1" "$WORK/fs/s2"
	chown 1001:1001 "$WORK/fs/s1"
	chown 1002:1002 "$WORK/fs/s2"
	chmod 755 "$WORK/fs"
	chmod 711 "$WORK" # the writers walk to the mount as themselves
	log "sluice: --limit 'gN wbps=${WBPS_MIB}MiB' for uids 1001 and 1002"
	sluice_mount "$WORK/sluice.log" "$WORK/fs" "$WORK/mnt" \
		--group 'g1 uid=1001' --group 'g2 uid=1002' \
		--limit "g1 wbps=${WBPS_MIB}MiB" --limit "g2 wbps=${WBPS_MIB}MiB"
	run_case sluice "$WORK/mnt/s1" "$WORK/mnt/s2" \
		"setpriv --reuid=1001 --regid=1001 --clear-groups" "setpriv --reuid=1002 --regid=1002 --clear-groups"
	sluice_stat "$WORK/mnt" "$WORK/stat.json" && python3 - "$WORK/stat.json" <<'EOF' >&2 || true
import json, sys
for g in json.load(open(sys.argv[1]))["groups"]:
    if g["group"] in ("g1", "g2"):
        print(f"# sluice stat {g['group']}: wbytes {g['wbytes']}, writeback started early {g['wb_early']}, "
              f"dirty now {g['dirty']}, writers paused {g['wthrottled_ns'] / 1e9:.1f}s (summed over pieces)")
EOF
	stop_fuse
fi

echo
echo "seed 003: 2 groups x $J buffered writers (1 MiB), wbps=${WBPS_MIB}MiB each, ${RT}s, sync from root at $((RT / 2))s"
print_table "$ROWS"
cat <<EOF

targets: achieved/limit 0.98-1.02 for every group; sync <= 1 s.
seed 003 (io.max, 16 writers per group at 10 MiB/s): sync 51.2 s; paced at write() (fsio): 0.146 s.
EOF
