// Package fidelity holds the simulator's fidelity test: one scenario whose
// device is calibrated to a loop-device ext4 (its measured bandwidth and
// latency) and whose FUSE round trip is measured on a real mount, run both
// in the simulator (package sim) and on a real sluice mount (package fsys)
// in the same test run, the two compared on achieved bandwidth and on the
// readahead counters. It lives in a package of its own so that it can
// import both without a cycle. The package has no code outside its test.
//
// The test needs root, /dev/fuse, mkfs.ext4 and losetup, and skips without
// them or with -short. It uses fio for the readers when fio is installed.
package fidelity
