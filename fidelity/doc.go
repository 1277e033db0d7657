// Package fidelity holds the simulator's fidelity test: one scenario whose
// device is calibrated to a loop-device ext4 (its measured bandwidth and
// 4 KiB read latency) and whose FUSE round trip is measured on a real
// mount, run both in the simulator (package sim) and on a real sluice
// mount in the same test run, the two compared on achieved bandwidth and
// on the readahead counters. The mount is the sluice command, built by
// the test without the race detector (go build, with the go command in
// PATH) and run as a process of its own, its counters read with sluice
// stat --json: with -race the detector slows only the test, never the
// FUSE server it measures, and the comparison is asserted all the same.
// It lives in a package of its own so that it can import the simulator
// and the mount's packages without a cycle; it has no code outside its
// test.
//
// The test needs root, /dev/fuse, mkfs.ext4, losetup and a go command,
// and skips without them or with -short. It reads with fio when fio is
// installed, otherwise with a Go loop. It measures in real time and needs
// the machine to itself: other processes slow the mount's server, which
// the simulator does not model. go test ./... runs other packages' tests
// beside it (on two cores, enough to fail it), so run this package on
// its own (go test -race ./fidelity); each case logs the CPU that others
// used during its real run, and who they were (processes, and the
// hypervisor's steal on a shared host). A case whose real run was busy
// and disagrees is run again, four times at most, and skipped, saying
// so, when every try was busy; a quiet run that disagrees fails.
// FIDELITY_CASES="rbps=4MiB rbps=16MiB" runs
// other limits than the default cases.
package fidelity
