#!/usr/bin/env bash
# Unthrottled overhead: what sluice costs with no limit set, against the
# native file system and a plain go-fuse loopback, on the same files, in one run.
#
# usage: overhead.sh [runtime_s=10]
#   env BENCH_FILE_MIB (default 4096): size of the test file
#   env OVERHEAD_PATHS (default "native loopback loopback-nopt loopback-dio sluice sluice-pt";
#     sluice-pt is sluice with --passthrough for groups without a limit)
#   env OVERHEAD_ROUNDS (default 3): rounds over all paths; the tables show
#       the median per path and case (rounds interleave the paths, so slow
#       spells of the machine spread over all of them)
#
# Paths (all over the same directory of one loop ext4):
#   native         the directory itself
#   loopback       go-fuse loopback, default options. On Linux >= 6.9 as root
#                  go-fuse turns on FUSE passthrough by itself: reads never
#                  reach the daemon, so this is close to native.
#   loopback-nopt  the same with passthrough refused: every read that misses
#                  the kernel page cache reaches the daemon (the FUSE baseline)
#   loopback-dio   the same with FOPEN_DIRECT_IO: every read reaches the
#                  daemon, no kernel page cache (the way sluice serves files)
#   sluice         sluice mount with no --limit (unlimited default group)
# Cases (caches dropped before each):
#   a  4k random reads, direct=1, psync, iodepth 1, time_based      -> IOPS
#   b  4k sequential reads, direct=0, one pass (capped at runtime)   -> MiB/s
#   c  1 MiB sequential reads, direct=0, one pass (capped at runtime)-> MiB/s
# The sequential cases read each byte once, so no path is served from a
# page cache warmed by an earlier pass.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

RT=${1:-10}
if ! [[ $RT =~ ^[1-9][0-9]*$ ]]; then die "runtime_s must be a positive integer (got '$RT')"; fi
FILE_MIB=${BENCH_FILE_MIB:-4096}
[[ $FILE_MIB =~ ^[0-9]+$ ]] || die "BENCH_FILE_MIB must be an integer"
PATHS=${OVERHEAD_PATHS:-"native loopback loopback-nopt loopback-dio sluice sluice-pt"}
ROUNDS=${OVERHEAD_ROUNDS:-3}
if ! [[ $ROUNDS =~ ^[1-9][0-9]*$ ]]; then die "OVERHEAD_ROUNDS must be a positive integer"; fi

require_env
setup_traps
make_workdir
build_loopback
build_sluice

IMG_MIB=$((FILE_MIB + FILE_MIB / 10 + 320))
log "loop ext4 of ${IMG_MIB} MiB, test file ${FILE_MIB} MiB, runtime ${RT}s"
make_loop_fs "$IMG_MIB" "$WORK/fs"
DATA=$WORK/fs/data
mkdir -p "$DATA"
write_file "$DATA/f" "$FILE_MIB"
warm_file "$DATA/f"

RES=$WORK/res
mkdir -p "$RES"

# --fadvise_hint=0: fio's default POSIX_FADV_SEQUENTIAL reaches only the
# native file (FUSE does not forward fadvise) and makes native 1 MiB buffered
# reads ~2.5x slower on a loop ext4, which would flatter every FUSE path.
case_args() { # case -> fio arguments
	echo --fadvise_hint=0
	case $1 in
	a) echo --rw=randread --bs=4k --direct=1 --ioengine=psync --iodepth=1 --time_based ;;
	b) echo --rw=read --bs=4k --direct=0 --ioengine=psync ;;
	c) echo --rw=read --bs=1M --direct=0 --ioengine=psync ;;
	esac
}

for ((round = 1; round <= ROUNDS; round++)); do
	for p in $PATHS; do
		dir=$WORK/mnt
		case $p in
		native) dir=$DATA ;;
		loopback) start_fuse "$WORK/$p.log" "$dir" "$LOOPBACK" "$DATA" "$dir" ;;
		loopback-nopt) start_fuse "$WORK/$p.log" "$dir" "$LOOPBACK" -no-passthrough "$DATA" "$dir" ;;
		loopback-dio) start_fuse "$WORK/$p.log" "$dir" "$LOOPBACK" -direct-io -no-passthrough "$DATA" "$dir" ;;
		sluice | sluice-pt)
			if [ -z "$SLUICE" ]; then
				log "sluice did not build; skipping its rows"
				continue
			fi
			if [ "$p" = sluice-pt ]; then
				sluice_mount "$WORK/$p.log" "$DATA" "$dir" --passthrough
			else
				sluice_mount "$WORK/$p.log" "$DATA" "$dir"
			fi
			;;
		*) die "unknown path '$p' in OVERHEAD_PATHS" ;;
		esac
		for c in a b c; do
			log "round $round/$ROUNDS, $p: case $c"
			drop_caches
			out=$RES/$p.$c.$round
			if [ "$p" = sluice ]; then sluice_stat "$dir" "$out.before" || true; fi
			# shellcheck disable=SC2046 # word splitting of case_args is intended
			fio_json "$out.json" --name="$p-$c" --filename="$dir/f" --size="${FILE_MIB}M" \
				--runtime="$RT" $(case_args "$c") || die "fio ($p, case $c) failed"
			if [ "$p" = sluice ]; then sluice_stat "$dir" "$out.after" || true; fi
		done
		if [ "$p" != native ]; then stop_fuse; fi
	done
done

echo
PYTHONPATH="$(dirname "$0")" python3 - "$RES" "$RT" "$PATHS" "$ROUNDS" <<'EOF'
import json, os, statistics, sys

from table import table

res, rt, paths, rounds = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4])
cases = {
    "a": ("4k randread direct=1 QD1", "IOPS"),
    "b": ("4k seq read buffered", "MiB/s"),
    "c": ("1M seq read buffered", "MiB/s"),
}

def load(path):
    with open(path) as f:
        text = f.read()
    return json.loads(text[text.index("{"):])

val, spread, ios = {}, {}, {}
for p in paths:
    for c in cases:
        vs = []
        for k in range(1, rounds + 1):
            fn = f"{res}/{p}.{c}.{k}.json"
            if not os.path.exists(fn):
                continue
            r = load(fn)["jobs"][0]["read"]
            secs = r["runtime"] / 1000
            vs.append(r["total_ios"] / secs if cases[c][1] == "IOPS" else r["io_bytes"] / secs / 2**20)
            if k == 1:
                ios[p, c] = r["total_ios"]
        if vs:
            val[p, c] = statistics.median(vs)
            spread[p, c] = (min(vs), max(vs))


shown = [p for p in paths if any((p, c) in val for c in cases)]
print(f"unthrottled reads, one test file, caches dropped before each run (runtime cap {rt}s)")
print(f"median of {rounds} rounds; min-max below" if rounds > 1 else "one round")
rows = [["case", "unit"] + shown]
for c, (name, unit) in cases.items():
    rows.append([f"{c}: {name}", unit] + [f"{val[p, c]:.0f}" if (p, c) in val else "-" for p in shown])
    if rounds > 1:
        rows.append(["", "range"] + [f"{spread[p, c][0]:.0f}-{spread[p, c][1]:.0f}" if (p, c) in val else "-"
                                     for p in shown])
table(rows)

def ratio(c, num, den):
    if (num, c) in val and (den, c) in val and val[den, c]:
        return val[num, c] / val[den, c]
    return None

print()
print("ratios (target: sluice vs the reference named)")
rows = [["case", "ratio", "value", "target", "verdict"]]
for c, num, den, tgt in [("a", "sluice", "loopback-nopt", 0.90), ("b", "sluice", "loopback-nopt", 0.80),
                         ("c", "sluice", "native", 0.80), ("a", "sluice-pt", "loopback-nopt", 0.90),
                         ("b", "sluice-pt", "loopback-nopt", 0.80), ("c", "sluice-pt", "native", 0.80)]:
    r = ratio(c, num, den)
    if num not in paths:
        continue
    rows.append([c, f"{num} / {den}", "-" if r is None else f"{r:.3f}", f">= {tgt:.2f}",
                 "-" if r is None else ("ok" if r >= tgt else "MISS")])
for c, num, den in [("a", "sluice", "loopback"), ("a", "sluice", "loopback-dio"), ("b", "sluice", "loopback"),
                    ("b", "sluice", "loopback-dio"), ("c", "sluice", "loopback-nopt"),
                    ("a", "loopback-nopt", "native"), ("b", "loopback-nopt", "native"), ("c", "loopback-nopt", "native"),
                    ("a", "loopback", "native"), ("c", "loopback", "native")]:
    r = ratio(c, num, den)
    if r is not None:
        rows.append([c, f"{num} / {den}", f"{r:.3f}", "(info)", ""])
table(rows)

if any(os.path.exists(f"{res}/sluice.{c}.1.after") for c in cases):
    print()
    print("where sluice's reads went (deltas of sluice stat, default group, round 1)")
    rows = [["case", "fio reads", "app_reads", "rios", "app MiB", "device MiB", "app_reads / fio reads"]]
    for c in cases:
        b, a = f"{res}/sluice.{c}.1.before", f"{res}/sluice.{c}.1.after"
        if not (os.path.exists(b) and os.path.exists(a)):
            continue
        def grp(fn):
            return next(g for g in json.load(open(fn))["groups"] if g["group"] == "default")
        gb, ga = grp(b), grp(a)
        d = {k: int(ga.get(k, 0)) - int(gb.get(k, 0)) for k in ("app_reads", "rios", "app_rbytes", "rbytes")}
        n = ios.get(("sluice", c), 0)
        rows.append([c, n, d["app_reads"], d["rios"], f"{d['app_rbytes'] / 2**20:.0f}", f"{d['rbytes'] / 2**20:.0f}",
                     f"{d['app_reads'] / n:.3f}" if n else "-"])
    table(rows)
    print("app_reads / fio reads ~1: every read reached sluice as issued; far below 1: the kernel page cache")
    print("served them and sluice saw readahead-sized requests; above 1: reads were split into FUSE requests.")
EOF
cat <<'EOF'

targets: (a) sluice >= 0.90 x loopback IOPS; (b) sluice >= 0.80 x loopback MiB/s;
(c) sluice >= 0.80 x native MiB/s. "loopback" for the targets is loopback-nopt:
with passthrough (go-fuse's default here) the daemon never sees a read, which a
throttling file system cannot do.
EOF
