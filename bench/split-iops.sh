#!/usr/bin/env bash
# Split I/O: an IOPS limit must count device-visible IOs. 1 MiB O_DIRECT writes
# are split into 128 KiB pieces; under wiops=100 the device must see 100
# writes/s (12.5 application writes/s), not 100 application writes/s.
#
# usage: split-iops.sh [runtime_s=20]
#
# Two paths, same loop ext4, same file, one run:
#   kernel  cgroup v1 blkio.throttle.write_iops_device = 100 on the loop
#           device, queue/max_sectors_kb = 128; device IOPS from the writes
#           completed in /sys/block/loopN/stat
#   sluice  --limit "default wiops=100" --max-io 128KiB over the file's
#           directory; device IOPS from sluice stat (wios), and the loop
#           device's own count as a cross-check
# fio job: --rw=write --bs=1M --direct=1 --ioengine=psync --time_based.
# Rates are divided by fio's own job runtime.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-20}
if ! [[ $RT =~ ^[1-9][0-9]*$ ]]; then die "runtime_s must be a positive integer (got '$RT')"; fi
IOPS=100
PIECE_KB=128

start_blkio_bench

# 12.5 MiB/s is expected; leave room for a throttle that lets 100 MiB/s by
# (time_based wraps around the file if it is too short, which is harmless).
FILE_MIB=$((16 * RT + 64))
IMG_MIB=$((FILE_MIB + FILE_MIB / 10 + 320))
log "loop ext4 of ${IMG_MIB} MiB, test file ${FILE_MIB} MiB, runtime ${RT}s"
make_loop_fs "$IMG_MIB" "$WORK/fs"
# lazytime: no mtime journal commits during the run to pollute the device count.
mount -o remount,lazytime "$WORK/fs"
DATA=$WORK/fs/data
mkdir -p "$DATA"
write_file "$DATA/f" "$FILE_MIB"

Q=/sys/block/$LOOPNAME/queue
if ! set_sysfs "$Q/max_sectors_kb" "$PIECE_KB"; then
	echo "warning: $LOOPNAME refused max_sectors_kb=$PIECE_KB (max_hw_sectors_kb=$(cat "$Q/max_hw_sectors_kb"))" >&2
fi
KPIECE=$(cat "$Q/max_sectors_kb")

FIO_JOB=(--name=split --rw=write --bs=1M --direct=1 --ioengine=psync
	--size="${FILE_MIB}M" --runtime="$RT" --time_based)

# loop_writes: "writes_completed sectors_written" of the loop device.
loop_writes() { awk '{ print $5, $7 }' "/sys/block/$LOOPNAME/stat"; }

ROWS=$WORK/rows
printf 'path\tcounted by\tapp IOPS (fio)\tapp MiB/s\tdevice IOPS\tdevice MiB/s\tdevice IOs per app IO\n' >"$ROWS"

# add_row PATH SOURCE FIO.json DELTA_IOS DELTA_BYTES
add_row() {
	python3 - "$@" >>"$ROWS" <<'EOF'
import json, sys
path, src, out, dios, dbytes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
with open(out) as f:
    text = f.read()
w = json.loads(text[text.index("{"):])["jobs"][0]["write"]
secs = w["runtime"] / 1000
app_iops = w["total_ios"] / secs
print(f"{path}\t{src}\t{app_iops:.2f}\t{w['io_bytes'] / secs / 2**20:.2f}\t{dios / secs:.2f}"
      f"\t{dbytes / secs / 2**20:.2f}\t{dios / max(w['total_ios'], 1):.2f}")
EOF
}

# ---- kernel
log "kernel: blkio.throttle.write_iops_device=$IOPS on $LOOPNAME (max_sectors_kb=$KPIECE)"
make_cgroup "sluice-bench-split.$$"
echo "$MAJMIN $IOPS" >"$CG/blkio.throttle.write_iops_device"
drop_caches
read -r w0 s0 < <(loop_writes)
in_cgroup "$CG" fio --output-format=json --output="$WORK/k.json" --filename="$DATA/f" \
	"${FIO_JOB[@]}" 2>"$WORK/k.err" || { cat "$WORK/k.err" >&2; die "fio (kernel) failed"; }
read -r w1 s1 < <(loop_writes)
echo "$MAJMIN 0" >"$CG/blkio.throttle.write_iops_device"
add_row kernel "$LOOPNAME stat" "$WORK/k.json" $((w1 - w0)) $(((s1 - s0) * 512))

# ---- sluice
if [ -z "$SLUICE" ]; then
	printf 'sluice\t(sluice did not build)\n' >>"$ROWS"
else
	log "sluice: --limit \"default wiops=$IOPS\" --max-io ${PIECE_KB}KiB"
	sluice_mount "$WORK/sluice.log" "$DATA" "$WORK/mnt" \
		--limit "default wiops=$IOPS" --max-io "${PIECE_KB}KiB"
	drop_caches
	sluice_stat "$WORK/mnt" "$WORK/before.json" || die "sluice stat failed"
	read -r w0 s0 < <(loop_writes)
	fio_json "$WORK/s.json" --filename="$WORK/mnt/f" "${FIO_JOB[@]}" || die "fio (sluice) failed"
	read -r w1 s1 < <(loop_writes)
	sluice_stat "$WORK/mnt" "$WORK/after.json" || die "sluice stat failed"
	stop_fuse
	dwios=$(stat_delta "$WORK/before.json" "$WORK/after.json" wios)
	dwbytes=$(stat_delta "$WORK/before.json" "$WORK/after.json" wbytes)
	dapp=$(stat_delta "$WORK/before.json" "$WORK/after.json" app_writes)
	add_row sluice "sluice stat" "$WORK/s.json" "$dwios" "$dwbytes"
	add_row sluice "$LOOPNAME stat" "$WORK/s.json" $((w1 - w0)) $(((s1 - s0) * 512))
	log "sluice: app_writes delta $dapp (write requests sluice received), wios delta $dwios"
fi

echo
echo "1 MiB O_DIRECT sequential writes under wiops=$IOPS, ${PIECE_KB} KiB device pieces (fio psync, ${RT}s)"
print_table "$ROWS"
cat <<EOF

targets: device IOPS $IOPS +/- 1; app IOPS $IOPS / (1024 / $PIECE_KB) = $(python3 -c "print($IOPS / (1024 / $PIECE_KB))");
bytes charged once (device MiB/s == app MiB/s).
a 2021 kernel without split charging (blk-throttle IOPS patch thread): 1995 device IOPS under a 100 IOPS limit.
EOF
