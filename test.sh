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
# The fidelity test compares a real mount's rates with the simulator's and
# needs the machine to itself: it runs after the others, alone.
go test -race -count=1 "$@" $(go list ./... | grep -v '/fidelity$')
# What the other tests wrote is written back first, not during its run.
sync
go test -race -count=1 "$@" ./fidelity
