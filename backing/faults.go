package backing

import (
	"sync"
	"time"
)

// Faults injects latency and errors into the file I/O of a tree: the
// stand-in for a slow or failing disk in tests and fault drills. Every
// file a tree opened with LocalOptions.Faults consults it before each
// read, write and sync. The zero value injects nothing; the setters may
// be called at any time, from any goroutine. A delay in progress ends
// when its kind's faults are set again: a hung disk that recovers answers
// the operations it held.
type Faults struct {
	mu                    sync.Mutex
	readDelay, writeDelay time.Duration
	readErr, writeErr     error
	reads, writes         int64         // operations that failed by injection
	readSet, writeSet     chan struct{} // closed by the next Set of the kind
}

// SetRead makes each read wait d and then fail with err (nil: succeed).
func (f *Faults) SetRead(d time.Duration, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readDelay, f.readErr = d, err
	if f.readSet != nil {
		close(f.readSet)
		f.readSet = nil
	}
}

// SetWrite makes each write and sync wait d and then fail with err (nil:
// succeed).
func (f *Faults) SetWrite(d time.Duration, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writeDelay, f.writeErr = d, err
	if f.writeSet != nil {
		close(f.writeSet)
		f.writeSet = nil
	}
}

// Failed returns how many reads and writes (syncs included) failed by
// injection.
func (f *Faults) Failed() (reads, writes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads, f.writes
}

func (f *Faults) read() error { return f.inject(&f.readDelay, &f.readErr, &f.reads, &f.readSet) }

func (f *Faults) write() error {
	return f.inject(&f.writeDelay, &f.writeErr, &f.writes, &f.writeSet)
}

// readPlan returns what to inject into one read, counting its failure,
// for a caller that does the waiting itself.
func (f *Faults) readPlan() (time.Duration, error) {
	d, _, err := f.plan(&f.readDelay, &f.readErr, &f.reads, nil)
	return d, err
}

// inject waits the delay, or until the kind's faults are set again, and
// returns the error set for one kind of operation, counting the failure.
func (f *Faults) inject(delay *time.Duration, errp *error, failed *int64, set *chan struct{}) error {
	d, changed, err := f.plan(delay, errp, failed, set)
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-changed:
			t.Stop()
		}
	}
	return err
}

// plan returns the delay and error of one operation of a kind, counting
// its failure, and with set, the channel closed when the kind's faults
// are set again.
func (f *Faults) plan(delay *time.Duration, errp *error, failed *int64, set *chan struct{}) (time.Duration, <-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *errp != nil {
		*failed++
	}
	var changed chan struct{}
	if set != nil && *delay > 0 {
		if *set == nil {
			*set = make(chan struct{})
		}
		changed = *set
	}
	return *delay, changed, *errp
}
