package backing

import (
	"sync"
	"time"
)

// Faults injects latency and errors into the file I/O of a tree: the
// stand-in for a slow or failing disk in tests and fault drills. Every
// file a tree opened with LocalOptions.Faults consults it before each
// read, write and sync. The zero value injects nothing; the setters may
// be called at any time, from any goroutine.
type Faults struct {
	mu                    sync.Mutex
	readDelay, writeDelay time.Duration
	readErr, writeErr     error
	reads, writes         int64 // operations that failed by injection
}

// SetRead makes each read wait d and then fail with err (nil: succeed).
func (f *Faults) SetRead(d time.Duration, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readDelay, f.readErr = d, err
}

// SetWrite makes each write and sync wait d and then fail with err (nil:
// succeed).
func (f *Faults) SetWrite(d time.Duration, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writeDelay, f.writeErr = d, err
}

// Failed returns how many reads and writes (syncs included) failed by
// injection.
func (f *Faults) Failed() (reads, writes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads, f.writes
}

func (f *Faults) read() error { return f.inject(&f.readDelay, &f.readErr, &f.reads) }

func (f *Faults) write() error { return f.inject(&f.writeDelay, &f.writeErr, &f.writes) }

// readPlan returns what to inject into one read, counting its failure,
// for a caller that does the waiting itself.
func (f *Faults) readPlan() (time.Duration, error) {
	return f.plan(&f.readDelay, &f.readErr, &f.reads)
}

// inject waits the delay and returns the error set for one kind of
// operation, counting the failure.
func (f *Faults) inject(delay *time.Duration, errp *error, failed *int64) error {
	d, err := f.plan(delay, errp, failed)
	time.Sleep(d)
	return err
}

func (f *Faults) plan(delay *time.Duration, errp *error, failed *int64) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *errp != nil {
		*failed++
	}
	return *delay, *errp
}
