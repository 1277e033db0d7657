#!/usr/bin/env bash
# FUSE transports: how much faster is a FUSE server over io_uring (Linux
# 6.14+ FUSE-over-io_uring) than over classic read(2)/writev(2) on
# /dev/fuse, for 4 KiB random O_DIRECT reads at QD1, in IOPS and in server
# CPU time per request?
#
# usage: uring.sh [runtime_s=8] [repeats=3]
#
# One server, ./bench/fuseuring, serves a 1 GiB file of random data (kept in
# the page cache, so the transport is what is measured) with pread(2); every
# open gets FOPEN_DIRECT_IO, so every read reaches the server:
#   dev    one reader goroutine per CPU: read(2) on /dev/fuse, writev(2) replies
#   uring  one io_uring per CPU (thread pinned to it), FUSE_IO_URING_CMD_*
#          commands, $FUSE_URING_ENTRIES ring entries per queue (default 16)
# fio job, as uid 1001: --rw=randread --bs=4k --direct=1 --ioengine=psync
# --iodepth=1 --time_based, --numjobs 1 and 4, --group_reporting.
# Server CPU: utime+stime of the server from /proc/PID/stat before and after
# each fio run, divided by the reads fio completed.
# For scale, the same runs through sluice itself (--allow-other), over a
# directory holding the same file, on each of its transports
# (--transport dev: go-fuse over /dev/fuse; --transport uring: over
# FUSE-over-io_uring, 16 entries per queue):
#   sluice[-uring]          the group unlimited, --passthrough=false:
#                           sluice's unthrottled path
#   sluice-limited[-uring]  a limit the reads never reach (riops=10000000,
#                           --cache-mode direct): sluice's throttled path
# Unlike the two servers, sluice opens the backing file O_DIRECT as fio
# opened its file, so its reads reach the disk: its rows bound what a
# faster transport could give it, they do not isolate the transport.
# Rounds alternate the paths (each freshly mounted), so drift on the
# machine affects all alike; the summary shows medians.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-8}
REPEATS=${2:-3}
[[ $RT =~ ^[1-9][0-9]*$ ]] || die "runtime_s must be a positive integer (got '$RT')"
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || die "repeats must be a positive integer (got '$REPEATS')"
ENTRIES=${FUSE_URING_ENTRIES:-16}
FIO_UID=1001
JOBS="1 4"
TRANSPORTS="dev uring sluice sluice-uring sluice-limited sluice-limited-uring"

[ "$(id -u)" -eq 0 ] || die "must run as root (mount(2), /sys/module/fuse/parameters)"
for t in fio go python3 setpriv timeout awk dmesg; do
	command -v "$t" >/dev/null 2>&1 || die "'$t' not found in PATH"
done
[ -e /dev/fuse ] || die "/dev/fuse missing (modprobe fuse)"
URING_PARAM=/sys/module/fuse/parameters/enable_uring
[ -e "$URING_PARAM" ] || die "$URING_PARAM missing: this kernel ($(uname -r)) has no FUSE-over-io_uring (needs 6.14+ with CONFIG_FUSE_IO_URING)"

setup_traps
make_workdir
# fio runs as uid $FIO_UID and must reach the mount point inside $WORK.
chmod 711 "$WORK"

FUSEURING=$WORK/bin/fuseuring
mkdir -p "$WORK/bin"
go_build "$FUSEURING" ./bench/fuseuring || die "cannot build ./bench/fuseuring"

build_sluice
[ -n "$SLUICE" ] || die "sluice does not build"

set_sysfs "$URING_PARAM" Y || die "cannot write Y to $URING_PARAM"

BACKING=$WORK/backing
log "1 GiB of random data in $BACKING"
dd if=/dev/urandom of="$BACKING" bs=1M count=1024 status=none
cat "$BACKING" >/dev/null # page cache warm: the reads measure the transport
MNT=$WORK/mnt
mkdir -p "$MNT"
SRC=$WORK/src # for sluice: the same file as SRC/f
mkdir -p "$SRC"
ln "$BACKING" "$SRC/f"
chmod 755 "$SRC"
chmod 644 "$BACKING"

# start_server TRANSPORT LOG: mount and wait for the server's "ready" line
# (printed once a stat of MNT/f was answered over TRANSPORT). Sets FUSE_PID.
start_server() {
	local tr=$1 logf=$2
	local sluice_tr=dev
	[[ $tr == sluice*-uring ]] && sluice_tr=uring
	case $tr in
	sluice | sluice-uring)
		sluice_mount "$logf" "$SRC" "$MNT" --allow-other --passthrough=false --transport "$sluice_tr"
		return
		;;
	sluice-limited | sluice-limited-uring)
		sluice_mount "$logf" "$SRC" "$MNT" --group "t uid=$FIO_UID" --limit "t riops=10000000" --cache-mode direct --transport "$sluice_tr"
		return
		;;
	esac
	start_fuseuring "$logf" "$MNT" -transport "$tr" -entries "$ENTRIES" -backing "$BACKING" && return 0
	if [ "$tr" = uring ]; then
		echo "kernel messages about FUSE:" >&2
		dmesg | grep -i fuse | tail -n 5 | sed 's/^/    /' >&2 || true
	fi
	return 1
}

# check_data: the mount serves the backing file's bytes (first 100 bytes
# through od, and 1 MiB in the middle).
check_data() {
	local a b
	a=$(timeout 20 head -c 100 "$MNT/f" | od) || die "reading $MNT/f failed or hung"
	b=$(head -c 100 "$BACKING" | od)
	[ "$a" = "$b" ] || die "$MNT/f: first 100 bytes differ from the backing file"
	timeout 20 cmp -n 1048576 -i 536870912 "$MNT/f" "$BACKING" ||
		die "$MNT/f differs from the backing file at offset 512 MiB (or cmp hung)"
}

RAW=$WORK/raw.tsv
: >"$RAW"

# run_fio TRANSPORT JOBS ROUND
run_fio() {
	local tr=$1 j=$2 round=$3 out=$WORK/$1-$2-$3.json t0 t1
	t0=$(cpu_ticks "$FUSE_PID")
	if ! bg_wait timeout -k 10 $((RT + 60)) \
		setpriv --reuid=$FIO_UID --regid=$FIO_UID --clear-groups \
		fio --name=r --filename="$MNT/f" --rw=randread --bs=4k --direct=1 \
		--ioengine=psync --iodepth=1 --runtime="$RT" --time_based \
		--numjobs="$j" --group_reporting --output-format=json \
		>"$out" 2>"$out.err"; then
		cat "$out.err" >&2
		die "fio failed or timed out ($tr, $j jobs, round $round)"
	fi
	t1=$(cpu_ticks "$FUSE_PID")
	python3 - "$out" "$tr" "$j" "$round" $((t1 - t0)) >>"$RAW" <<'EOF'
import json, os, sys
out, tr, jobs, rnd, ticks = sys.argv[1:6]
with open(out) as f:
    text = f.read()
r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
ios = r["total_ios"]
cpu_us = int(ticks) / os.sysconf("SC_CLK_TCK") * 1e6
print(f"{tr}\t{jobs}\t{rnd}\t{r['iops']:.0f}\t{cpu_us / max(ios, 1):.2f}\t{r['clat_ns']['mean'] / 1e3:.1f}\t{ios}\t{ticks}")
EOF
	log "$(tail -n 1 "$RAW" | awk -F'\t' '{ printf "%s, %s jobs, round %s: %s IOPS, %s us CPU/read, clat %s us", $1, $2, $3, $4, $5, $6 }')"
}

for ((round = 1; round <= REPEATS; round++)); do
	for tr in $TRANSPORTS; do
		start_server "$tr" "$WORK/$tr-$round.log" || die "the $tr server did not start (see above)"
		check_data
		for j in $JOBS; do
			run_fio "$tr" "$j" "$round"
		done
		stop_fuse
		log "$tr server: $(grep -h 'requests over' "$WORK/$tr-$round.log" || echo 'no request counts')"
	done
done

echo
echo "4 KiB random O_DIRECT reads, QD1 (fio psync, ${RT}s per run, $REPEATS rounds), 1 GiB page-cached backing file; $(nproc) CPUs, $(uname -r)"
echo "server CPU = utime+stime of the FUSE server (/proc/PID/stat, $(getconf CLK_TCK) ticks/s) / reads completed"
ROWS=$WORK/rows.tsv
printf 'transport\tjobs\tround\tIOPS\tserver CPU us/read\tclat mean us\n' >"$ROWS"
cut -f1-6 "$RAW" >>"$ROWS"
echo
print_table "$ROWS"

SUMMARY=$WORK/summary.tsv
python3 - "$RAW" >"$SUMMARY" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
for tr, jobs, _, iops, cpu, clat, *_ in rows:
    med.setdefault((tr, jobs), []).append((float(iops), float(cpu), float(clat)))
print("transport\tjobs\tIOPS (median)\tserver CPU us/read (median)\tclat mean us (median)\tIOPS vs dev\tCPU/read vs dev")
for (tr, jobs), v in med.items():
    iops, cpu, clat = (statistics.median(x[i] for x in v) for i in range(3))
    d = med.get(("dev", jobs))
    if d:
        diops = statistics.median(x[0] for x in d)
        dcpu = statistics.median(x[1] for x in d)
        rel = f"{iops / diops:.2f}x\t{cpu / dcpu:.2f}x" if dcpu else f"{iops / diops:.2f}x\t-"
    else:
        rel = "-\t-"
    print(f"{tr}\t{jobs}\t{iops:.0f}\t{cpu:.2f}\t{clat:.1f}\t{rel}")
EOF
echo
print_table "$SUMMARY"
echo
python3 - "$RAW" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
for tr, jobs, _, iops, cpu, clat, *_ in rows:
    med.setdefault((tr, jobs), []).append((float(iops), float(cpu), float(clat)))
m = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in med.items()}
for base in ("sluice", "sluice-limited"):
    for jobs in sorted({j for _, j in m}):
        a, b = m.get((base + "-uring", jobs)), m.get((base, jobs))
        if a and b and b[0] and b[1]:
            print(f"{base}, {jobs} job(s), --transport uring / dev: IOPS {a[0] / b[0]:.2f}x, CPU/read {a[1] / b[1]:.2f}x, clat {a[2] / b[2]:.2f}x")
EOF
