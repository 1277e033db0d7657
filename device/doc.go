// Package device is what sits below the stack: the disks that backing
// files live on, seen as objects read, written and flushed at offsets.
//
//   - File is a backing file as a driver uses it; backing.File is the real
//     one.
//   - Mem is a file in memory: a sparse map of written pages over a
//     pattern that needs no storage, so a test or a simulation can read
//     terabytes of it in bounded memory.
//   - Faulty wraps a File to add latency and errors (tests of the real
//     engine, on virtual time under testing/synctest).
//   - Model is a pure timing model of a disk for the simulator: given the
//     time an I/O is started and where, it returns when it completes, from
//     the disk's bandwidth (for reads, and for writes), per-I/O latency
//     distribution, positioning time of a random I/O, queue depth,
//     slowdowns and injected errors. It never sleeps or reads the clock; its randomness
//     comes from the seed it is given.
package device

import "io"

// File is a backing object as a driver reads, writes and flushes it.
type File interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
}

// Op is the kind of a device I/O.
type Op uint8

const (
	Read Op = iota
	Write
	Flush
)

func (o Op) String() string {
	switch o {
	case Read:
		return "read"
	case Write:
		return "write"
	case Flush:
		return "flush"
	}
	return "op?"
}
