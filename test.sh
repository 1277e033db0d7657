#!/usr/bin/env bash
# sluice's test command: formatting, vet, and every test with the race
# detector. Tests that mount need root and /dev/fuse and say so when they
# skip.
set -euo pipefail
cd "$(dirname "$0")"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
# Tests that measure a real mount's rates against a tolerance need the
# machine to themselves: the two-core VMs the project runs on cannot serve
# a 4 KiB tenant's share, or tell a 5 ms slower mirror, while other
# packages' tests load both cores. They run after the others, one package
# at a time.
alone='^(TestSiblingShareOnMount|TestDeviceShareOnMount|TestMirrorSlow|TestNeighbourStall|TestWriteCacheLimitedCached|TestClusterShare|TestClusterDeviceShareOnMount|TestTakeoverFio|TestSuperviseFio)$'
go test -race -count=1 -skip "$alone" "$@" $(go list ./... | grep -v '/fidelity$')
# Allocations per request of the hot path: the race detector keeps no
# counts, so these run without it; so does the lease test of a hundred
# hosts, whose in-process Redis runs its Lua many times slower under it.
go test -count=1 -run 'Allocs$|^TestHundredHosts$' "$@" ./engine ./fsys ./lease
# The permission, coherence, model and data tests again with every mount
# passing its unlimited groups' opens through (as sluice mount does).
go test -race -count=1 -run '^(TestPerm.*|TestCoherence.*|TestCoherentAcrossGroups|TestWriteCoherent|TestModel|TestFio|TestFioVerify|TestReservedBlocks|TestFallocateReserved|TestAppend|TestAppendOnly|TestOwner|TestFullDisk|TestMmapExec|TestMetadata)$' "$@" ./fsys -args -passthrough
# The permission, coherence, model and data-verifying tests again with
# every mount on FUSE-over-io_uring (skipped where the kernel lacks it;
# the run turns the fuse module's enable_uring on as root, and back off).
go test -race -count=1 -run '^(TestPerm.*|TestCoherence.*|TestModel|TestFioVerify|TestFio)$' "$@" ./fsys -args -transport=uring
# The FUSE-over-io_uring transport, the reader cap and the connection handover in the go-fuse fork (a module of its
# own, which the commands above leave out).
(cd third_party/go-fuse && go test -race -count=1 -run 'IOUring|MaxReaders|Handover' ./fuse)
# The benchmarks' shell library: how it tells a daemon is still running.
bash bench/lib_test.sh
# What the other tests wrote is written back first, not during their runs.
sync
go test -race -count=1 -p 1 -run "$alone" "$@" ./fsys ./cmd/sluice
# The fidelity test compares a real mount with the simulator.
go test -race -count=1 "$@" ./fidelity
# The parsers of what operators and clients send, and the throttle and the
# stack driven by random operations on virtual time, fuzzed a few seconds
# each: a count of inputs per target, about 2 s of each on this VM, since a
# duration races the fuzzing coordinator's own deadline in Go 1.26
# (golang/go#75804: "context deadline exceeded" with no input at fault,
# under load). FUZZTIME (a count such as 100000x, or a duration) applies
# one budget to every target; a crasher found is kept in the package's
# testdata/fuzz and fails every later run.
for target in group:FuzzParseSize:25000x group:FuzzParseLimit:20000x group:FuzzParseRule:30000x \
	control:FuzzAnswer:25000x cmd/sluice:FuzzConfig:700x cmd/sluice:FuzzFstab:6000x sim:FuzzScenario:60x \
	throttle:FuzzThrottle:8000x stack:FuzzStack:3000x; do
	pkg=${target%%:*} rest=${target#*:}
	go test -run '^$' -fuzz "^${rest%%:*}\$" -fuzztime "${FUZZTIME:-${rest#*:}}" "./$pkg"
done
