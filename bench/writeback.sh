#!/usr/bin/env bash
# Seed 003: buffered writers in groups limited to wbps, and a sync from an
# unlimited process half-way through. Throttling at writeback (the
# kernel's blk-throttle) leaves each group's writes dirty in the page cache
# and the sync waits for all of them at the groups' rates; sluice paces at
# write() and starts writeback of what it admitted, so the sync finds
# little to wait for.
#
# usage: writeback.sh [runtime_s=30] [cases=two,three,mmap]
#
# Cases (fio, 1 MiB blocks, 64 MiB files, time-based, sync from root at
# runtime/2):
#   two    two groups at 10 MiB/s, 8 buffered writers each
#   three  three groups at 5, 20 and 80 MiB/s, 4 buffered writers each,
#          and an unlimited writer of 2 GiB started with them; run again
#          with the unlimited writer alone ("three-idle"), to tell what the
#          limited groups add to its sync
#   mmap   one group at 2 MiB/s writing through a shared mapping
#          (fio --ioengine=mmap)
#
# Two paths, same loop ext4, one run:
#   kernel  cgroup v1 blkio.throttle.write_bps_device on the loop device,
#           one cgroup per group, fio inside it
#   sluice  --group 'gN uid=100N' --limit 'gN wbps=..' over a directory of
#           the loop file system, fio as uid 100N; the unlimited writer is
#           root, through the mount
# Reported per group: achieved/limit (fio's bandwidth over its runtime);
# per run: the sync's wall time, the system's Dirty + Writeback just before
# it, its peak, and its value every second.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-30}
CASES=${2:-two,three,mmap}
[[ $RT =~ ^[1-9][0-9]*$ ]] && ((RT >= 4)) ||
	die "runtime_s must be an integer of at least 4 (got '$RT'); usage: writeback.sh [runtime_s] [cases]"
for c in ${CASES//,/ }; do
	case $c in two | three | mmap) ;; *) die "unknown case '$c': cases are two, three and mmap, comma-separated" ;; esac
done
has_case() { [[ ,$CASES, == *,$1,* ]]; }

start_blkio_bench

IMG_MIB=$((16 * 64 + 2048 + 1024))
log "loop ext4 of ${IMG_MIB} MiB; cases $CASES; ${RT}s each; sync at $((RT / 2))s"
make_loop_fs "$IMG_MIB" "$WORK/fs"
chmod 755 "$WORK/fs"
chmod 711 "$WORK" # the writers walk to the mount as themselves

ROWS=$WORK/rows
SERIES=$WORK/series
printf 'case\tpath\tgroup\tlimit (MiB/s)\tachieved/limit\tMiB/s\tsync (s)\tdirty before sync (MiB)\tdirty peak (MiB)\n' >"$ROWS"
: >"$SERIES"

dirty_mib() { awk '/^(Dirty|Writeback):/ { s += $2 } END { printf "%.0f", s / 1024 }' /proc/meminfo; }

# Kernel groups: one cgroup each, limits set per case.
CGS=()
for g in 1 2 3; do
	make_cgroup "sluice-bench-wb$g.$$"
	CGS+=("$CG")
done
cat >"$WORK/incg" <<'EOF'
#!/bin/sh
cg=$1
shift
echo $$ >"$cg/cgroup.procs" && exec "$@"
EOF
chmod +x "$WORK/incg"

# run CASE PATH ROOT LIMITS_MIB JOBS ENGINE UNLIMITED: one run. ROOT holds
# a directory per group (gN; u for the unlimited writer). LIMITS_MIB lists
# the groups' limits; JOBS is writers per group; ENGINE is psync or mmap;
# UNLIMITED is 1 to add the unlimited writer of 2 GiB. Adds rows and a
# series line.
run() {
	local cs=$1 path=$2 root=$3 limits=$4 jobs=$5 engine=$6 unl=$7
	local pids=() names=() n=0 lim g d pre dirty s e sampler
	drop_caches
	for lim in $limits; do
		n=$((n + 1))
		g=g$n d=$root/g$n
		if [ "$path" = kernel ]; then
			echo "$MAJMIN $((lim << 20))" >"${CGS[$((n - 1))]}/blkio.throttle.write_bps_device"
			pre="$WORK/incg ${CGS[$((n - 1))]}"
		else
			pre="setpriv --reuid=$((1000 + n)) --regid=$((1000 + n)) --clear-groups"
		fi
		local extra=(--directory="$d" --size=64M --numjobs="$jobs")
		if [ "$engine" = mmap ]; then
			# Made beforehand, so that fio does not lay it out with write().
			truncate -s 64M "$d/m"
			chown "$((1000 + n))" "$d/m"
			extra=(--filename="$d/m" --size=64M --ioengine=mmap)
		fi
		# shellcheck disable=SC2086 # the prefix is a command and its words
		$pre fio --output-format=json --name="$g" "${extra[@]}" \
			--rw=write --bs=1M --runtime="$RT" --time_based \
			--group_reporting >"$WORK/$cs.$path.$g.json" 2>"$WORK/$cs.$path.$g.err" &
		pids+=($!)
		names+=("$g:$lim")
	done
	if [ "$unl" = 1 ]; then
		fio --output-format=json --name=u --directory="$root/u" --rw=write --bs=1M --size=2G \
			>"$WORK/$cs.$path.u.json" 2>"$WORK/$cs.$path.u.err" &
		pids+=($!)
		names+=("u:-")
	fi
	(
		i=0
		while :; do
			echo "$i $(dirty_mib)"
			sleep 1
			i=$((i + 1))
		done
	) >"$WORK/$cs.$path.dirty" &
	sampler=$!
	sleep $((RT / 2))
	dirty=$(dirty_mib)
	s=$(date +%s.%N)
	sync
	e=$(date +%s.%N)
	for g in "${pids[@]}"; do wait "$g" || { cat "$WORK/$cs.$path".*.err >&2; die "fio ($cs, $path) failed"; }; done
	kill "$sampler"
	wait "$sampler" 2>/dev/null || true
	for g in "${names[@]}"; do
		python3 - "$cs" "$path" "${g%%:*}" "${g#*:}" "$WORK/$cs.$path.${g%%:*}.json" "$s" "$e" "$dirty" "$WORK/$cs.$path.dirty" >>"$ROWS" <<'EOF'
import json, sys
cs, path, grp, lim, out, s, e, dirty, series = sys.argv[1:10]
text = open(out).read()
w = json.loads(text[text.index("{"):])["jobs"][0]["write"]
bw = w["bw_bytes"]
ratio = f"{bw / (int(lim) << 20):.3f}" if lim != "-" else "-"
peak = max(int(l.split()[1]) for l in open(series) if l.strip())
print(f"{cs}\t{path}\t{grp}\t{lim}\t{ratio}\t{bw / 2**20:.1f}\t{float(e) - float(s):.2f}\t{dirty}\t{peak}")
EOF
	done
	printf '%s %s: %s\n' "$cs" "$path" "$(awk '{ printf "%s ", $2 }' "$WORK/$cs.$path.dirty")" >>"$SERIES"
	for g in 1 2 3; do echo "$MAJMIN 0" >"${CGS[$((g - 1))]}/blkio.throttle.write_bps_device"; done
	rm -rf "${root:?}"/g* "${root:?}"/u
	sync
}

# dirs ROOT N UNLIMITED: the groups' directories under ROOT, owned by the
# groups' uids (and u for the unlimited writer).
dirs() {
	local g
	for ((g = 1; g <= $2; g++)); do
		mkdir -p "$1/g$g"
		chown "$((1000 + g))" "$1/g$g"
	done
	if [ "$3" = 1 ]; then mkdir -p "$1/u"; fi
}

# each CASE LIMITS_MIB JOBS ENGINE UNLIMITED: the case on both paths.
each() {
	local cs=$1 limits=$2 jobs=$3 engine=$4 unl=$5 n lim args=()
	n=$(wc -w <<<"$limits")
	mkdir -p "$WORK/fs/k"
	dirs "$WORK/fs/k" "$n" "$unl"
	log "$cs, kernel: blkio.throttle.write_bps_device (MiB/s) $limits on $LOOPNAME"
	run "$cs" kernel "$WORK/fs/k" "$limits" "$jobs" "$engine" "$unl"
	rm -rf "$WORK/fs/k"
	if [ -z "$SLUICE" ]; then
		printf '%s\tsluice\t(sluice did not build)\n' "$cs" >>"$ROWS"
		return
	fi
	mkdir -p "$WORK/fs/s"
	dirs "$WORK/fs/s" "$n" "$unl"
	n=0
	for lim in $limits; do
		n=$((n + 1))
		args+=(--group "g$n uid=$((1000 + n))" --limit "g$n wbps=${lim}MiB")
	done
	# A group rule with no limit for a case with no limited groups keeps
	# the mount open to other users.
	[ ${#args[@]} -gt 0 ] || args=(--group "g1 uid=1001")
	log "$cs, sluice: ${args[*]}"
	sluice_mount "$WORK/sluice.$cs.log" "$WORK/fs/s" "$WORK/mnt" "${args[@]}"
	run "$cs" sluice "$WORK/mnt" "$limits" "$jobs" "$engine" "$unl"
	sluice_stat "$WORK/mnt" "$WORK/stat.$cs.json" && python3 - "$WORK/stat.$cs.json" "$cs" <<'EOF' >&2 || true
import json, sys
for g in json.load(open(sys.argv[1]))["groups"]:
    if g["wbytes"]:
        print(f"# {sys.argv[2]}, sluice stat {g['group']}: wbytes {g['wbytes']}, written back early {g['wb_early']}, "
              f"without a caller {g['wb_callerless']}, dirty now {g['dirty']}, writers paused {g['wthrottled_ns'] / 1e9:.1f}s (summed over pieces)")
EOF
	stop_fuse
	rm -rf "$WORK/fs/s"
}

has_case two && each two "10 10" 8 psync 0
if has_case three; then
	each three "5 20 80" 4 psync 1
	each three-idle "" 4 psync 1
fi
has_case mmap && each mmap "2" 1 mmap 0

echo
echo "seed 003: buffered writers in limited groups, sync from root at $((RT / 2))s of ${RT}s"
print_table "$ROWS"
echo
echo "dirty + writeback (MiB), every second from the start of each run:"
cat "$SERIES"
cat <<EOF

targets: achieved/limit 0.98-1.02 for every limited group; sync <= 1 s in
cases two and mmap; in case three, the limited groups add <= 0.5 s to the
sync of three-idle (the unlimited writer alone).
seed 003 (io.max, 16 writers per group at 10 MiB/s): sync 51.2 s; paced at write() (fsio): 0.146 s.
EOF
