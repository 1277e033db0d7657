#!/usr/bin/env bash
# Metadata cost: create, stat and unlink of many empty files through sluice,
# against the native file system and a plain go-fuse loopback, on the same
# loop ext4, in one run.
#
# usage: metadata.sh
#   env METADATA_FILES (default 20000): files in all
#   env METADATA_DIRS (default 20): directories they are spread over
#   env METADATA_THREADS (default 2): parallel workers, each over its share
#       of the directories
#   env METADATA_PATHS (default "native loopback-nopt loopback-dp sluice")
#   env METADATA_ROUNDS (default 3): rounds over all paths; the table shows
#       the median per path and phase (rounds interleave the paths, so slow
#       spells of the machine spread over all of them)
#   env METADATA_SLUICE_FLAGS (default none): extra flags for sluice mount,
#       e.g. "--max-open 4096"
#
# Paths (all over the same directory of one loop ext4):
#   native         the directory itself
#   loopback-nopt  bench/loopback -no-passthrough -timeout 1s: go-fuse's
#                  loopback with the entry and attribute timeouts sluice uses
#   loopback-dp    the same with default_permissions: the kernel checks every
#                  caller's permissions, as on a sluice mount (sluice always
#                  mounts so); after each change in a directory the next
#                  permission check fetches the directory's attributes again
#   sluice         sluice mount with no --limit (unlimited default group)
#   sluice-supervised  the same with --supervise: each new object, open,
#                  release and forget is also told to the supervisor
# Phases (bench/metaops; caches dropped before each, a fresh directory tree
# per path and round):
#   create  open(O_CREAT|O_EXCL|O_WRONLY) + close   -> ops/s
#   stat    lstat                                    -> ops/s
#   unlink  unlink                                   -> ops/s
# A phase that fails (an operation returned an error) is reported with its
# error, the path's later phases in that round are skipped, and the table
# shows FAIL for them; the other paths still run.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

FILES=${METADATA_FILES:-20000}
DIRS=${METADATA_DIRS:-20}
THREADS=${METADATA_THREADS:-2}
PATHS=${METADATA_PATHS:-"native loopback-nopt loopback-dp sluice"}
ROUNDS=${METADATA_ROUNDS:-3}
read -r -a SLUICE_FLAGS <<<"${METADATA_SLUICE_FLAGS:-}"
for v in FILES DIRS THREADS ROUNDS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "METADATA_$v must be a positive integer (got '${!v}')"
done
((FILES % DIRS == 0)) || die "METADATA_FILES ($FILES) must be a multiple of METADATA_DIRS ($DIRS)"

build_metaops() {
	METAOPS=$WORK/bin/metaops
	mkdir -p "$WORK/bin"
	go_build "$METAOPS" ./bench/metaops || die "cannot build the metaops helper"
}

require_env
setup_traps
make_workdir
build_loopback
build_metaops
build_sluice

# ext4 makes one inode per 16 KiB: leave room for FILES inodes and more.
IMG_MIB=$((FILES * 32 / 1024 + 512))
log "loop ext4 of ${IMG_MIB} MiB; $FILES files in $DIRS directories, $THREADS workers, $ROUNDS rounds"
make_loop_fs "$IMG_MIB" "$WORK/fs"
DATA=$WORK/fs/data
mkdir -p "$DATA"

RES=$WORK/res
mkdir -p "$RES"
PHASES="create stat unlink"

for ((round = 1; round <= ROUNDS; round++)); do
	for p in $PATHS; do
		dir=$WORK/mnt
		case $p in
		native) dir=$DATA ;;
		loopback-nopt) start_fuse "$WORK/$p.log" "$dir" "$LOOPBACK" -no-passthrough -timeout 1s "$DATA" "$dir" ;;
		loopback-dp) start_fuse "$WORK/$p.log" "$dir" "$LOOPBACK" -no-passthrough -timeout 1s -default-permissions "$DATA" "$dir" ;;
		sluice)
			if [ -z "$SLUICE" ]; then
				log "sluice did not build; skipping its rows"
				continue
			fi
			sluice_mount "$WORK/$p.log" "$DATA" "$dir" "${SLUICE_FLAGS[@]}"
			;;
		sluice-supervised)
			if [ -z "$SLUICE" ]; then
				log "sluice did not build; skipping its rows"
				continue
			fi
			sluice_mount "$WORK/$p.log" "$DATA" "$dir" --supervise "${SLUICE_FLAGS[@]}"
			;;
		*) die "unknown path '$p' in METADATA_PATHS" ;;
		esac
		for ph in $PHASES; do
			out=$RES/$p.$ph.$round.json
			if [ -e "$RES/$p.$round.failed" ]; then
				echo "skipped after an earlier failure" >"$out.fail"
				continue
			fi
			log "round $round/$ROUNDS, $p: $ph"
			drop_caches
			if ! bg_wait "$METAOPS" -dir "$dir/tree-$p-$round" -files "$FILES" -dirs "$DIRS" -threads "$THREADS" \
				-phases "$ph" >"$out" 2>"$out.err"; then
				echo "warning: $p, $ph failed: $(cat "$out.err")" >&2
				cp "$out.err" "$out.fail"
				rm -f "$out"
				touch "$RES/$p.$round.failed"
			fi
		done
		if [ "$p" != native ]; then stop_fuse; fi
	done
done

echo
PYTHONPATH="$(dirname "$0")" python3 - "$RES" "$PATHS" "$ROUNDS" "$PHASES" "$FILES" "$DIRS" "$THREADS" <<'EOF'
import json, os, statistics, sys

from table import table

res, paths, rounds, phases = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4].split()
files, dirs, threads = sys.argv[5:8]

val, spread, failed, errors = {}, {}, set(), []
for p in paths:
    for ph in phases:
        vs = []
        for k in range(1, rounds + 1):
            fn = f"{res}/{p}.{ph}.{k}.json"
            if os.path.exists(fn):
                with open(fn) as f:
                    vs.append(json.loads(f.read())["ops_per_s"])
            elif os.path.exists(fn + ".fail"):
                failed.add((p, ph))
                with open(fn + ".fail") as f:
                    msg = f.read().strip()
                if not msg.startswith("skipped"):
                    errors.append(f"{p}, {ph}, round {k}: {msg}")
        if vs:
            val[p, ph] = statistics.median(vs)
            spread[p, ph] = (min(vs), max(vs))


def ratio(ph, num, den):
    if (num, ph) in failed or (den, ph) in failed:
        return "-"
    if (num, ph) in val and (den, ph) in val and val[den, ph]:
        return f"{val[num, ph] / val[den, ph]:.3f}"
    return "-"

shown = [p for p in paths if any((p, ph) in val or (p, ph) in failed for ph in phases)]
print(f"metadata: {files} empty files in {dirs} directories, {threads} workers, caches dropped before each phase")
print(f"ops/s, median of {rounds} rounds; min-max below" if rounds > 1 else "ops/s, one round")
head = ["phase"] + shown
ratios = [(n, d) for n, d in [("sluice", "loopback-dp"), ("sluice", "loopback-nopt"), ("sluice", "native"), ("loopback-nopt", "native")]
          if n in shown and d in shown]
head += [f"{n} / {d}" for n, d in ratios]
rows = [head]
for ph in phases:
    def cell(p):
        if (p, ph) in failed:
            return "FAIL" if (p, ph) not in val else f"{val[p, ph]:.0f} (FAIL)"
        return f"{val[p, ph]:.0f}" if (p, ph) in val else "-"
    rows.append([ph] + [cell(p) for p in shown] + [ratio(ph, n, d) for n, d in ratios])
    if rounds > 1:
        rows.append([""] + [f"{spread[p, ph][0]:.0f}-{spread[p, ph][1]:.0f}" if (p, ph) in val else "-"
                            for p in shown] + [""] * len(ratios))
table(rows)
if errors:
    print()
    print("failures (FAIL: the phase stopped at its first error in at least one round):")
    for e in errors:
        print("  " + e)
EOF
