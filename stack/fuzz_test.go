package stack

import (
	"fmt"
	"testing"
	"time"

	"sluice/throttle"
)

// FuzzStack decodes its input into application reads and writes of 1 B
// to 4 MiB through two handles of one 8 MiB file (one of them Whole) by
// groups a, a/x and b, limit changes (as the engine makes them:
// CheckLimits, then SetLimits) from 1 B/s and 1 IOPS to 100 GiB/s and
// unlimited, cancellations, and moves of the clock, on which the driver
// calls Tick at every Wake. The device is instant: every I/O the stack
// starts completes in full at once. After every call it checks:
//
//   - No request is lost or answered twice: each finishes in exactly one
//     Actions.Done, and once the clock follows the wake-ups (limits kept)
//     all finish; Wake is -1 only when no request waits, else not before
//     now.
//   - The wait cap (Options.MaxWait, "no request waits past the cap for
//     the throttle"): with an instant device, a request that waits only
//     for the throttle finishes at most MaxWait after it arrived, and
//     unless cancelled with at least one byte (one page forced through
//     into debt, or its pieces started).
//
// The throttle's own invariants are FuzzThrottle's (package throttle).
func FuzzStack(f *testing.F) {
	f.Add([]byte{})
	// 1 B/s on a, a 4 MiB read and a 4 MiB write by a/x, a 50 ms cap.
	f.Add([]byte{0x12, sopLimit, 0, 1, 0, 0, 0, sopRead, 1, 0, 0, 0, 9, sopWrite, 1, 0, 0, 0, 9, sopAdvance, 7})
	// 1 IOPS on b, reads through the Whole handle, cancelled, 1 s cap.
	f.Add([]byte{0x23, sopLimit, 2, 0, 0, 1, 1, sopRead, 2, 1, 3, 4, 5, sopRead, 2, 1, 0, 0, 8, sopCancel, 0,
		sopAdvance, 8, sopAdvance, 6, sopLimit, 2, 5, 5, 0, 0, sopAdvance, 8})
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := fuzzStack(in); err != nil {
			t.Fatal(err)
		}
	})
}

const (
	sopRead    = iota // group, handle, off (2 bytes), size
	sopWrite          // group, handle, off (2 bytes), size
	sopAdvance        // step (or to the next Wake)
	sopLimit          // group, rbps, wbps, riops, wiops
	sopCancel         // index of a waiting request
	sopCount
)

var (
	fuzzStackPaths = []string{"a", "a/x", "b"}
	fuzzStackSizes = []int64{1, 100, PageSize, PageSize + 1, 64 * KiB, 128 * KiB, 129 * KiB, MiB, 3 * MiB, 4 * MiB}
	fuzzStackBPS   = []int64{0, 1, 4096, MiB, 10 * MiB, 100 << 30}
	fuzzStackIOPS  = []int64{0, 1, 10, 1000}
	fuzzStackSteps = []int64{0, 1, 1000, ms, 10 * ms, 100 * ms, sec, 3600 * sec}
	fuzzStackWaits = []time.Duration{0, time.Millisecond, 50 * time.Millisecond, time.Second}
)

const fuzzStackFile = 8 * MiB

type stackReq struct {
	r         *Request
	id        int
	arrived   int64
	n         int64
	done      bool
	cancelled bool
}

type stackRun struct {
	s       *Stack
	now     int64
	wake    int64
	maxWait int64
	reqs    []*stackReq
	byReq   map[*Request]*stackReq
	page    []byte
}

func fuzzStack(b []byte) error {
	i := 0
	next := func() byte {
		if i >= len(b) {
			return 0
		}
		i++
		return b[i-1]
	}
	h := next()
	opts := DefaultOptions()
	opts.MaxWait = fuzzStackWaits[h&3]
	opts.MaxIO = []int64{PageSize, 128 * KiB, MiB, 128 * KiB}[h>>2&3]
	opts.Readahead = []int64{0, 128 * KiB}[h>>4&1]
	opts.Burst = []time.Duration{0, 10 * time.Millisecond}[h>>5&1]
	s, err := New(opts)
	if err != nil {
		return err
	}
	run := &stackRun{s: s, now: 1_000_000_007, wake: -1, maxWait: int64(opts.MaxWait), byReq: map[*Request]*stackReq{}, page: make([]byte, PageSize)}
	groups := make([]*throttle.Group, len(fuzzStackPaths))
	for k, p := range fuzzStackPaths {
		groups[k] = s.Group(p)
	}
	handles := []*Handle{{Ino: 1}, {Ino: 1, Whole: true}}
	for ops := 0; i < len(b) && ops < 128; ops++ {
		switch op := next() % sopCount; op {
		case sopRead, sopWrite:
			g, hd := groups[int(next())%len(groups)], handles[next()&1]
			off := (int64(next())<<8 | int64(next())) * 128 % fuzzStackFile
			n := fuzzStackSizes[int(next())%len(fuzzStackSizes)]
			sr := &stackReq{r: &Request{}, id: len(run.reqs), arrived: run.now, n: n}
			run.reqs = append(run.reqs, sr)
			run.byReq[sr.r] = sr
			var a Actions
			if op == sopRead {
				a = s.Read(run.now, hd, g, off, n, sr.r)
			} else {
				a = s.Write(run.now, hd, g, off, n, sr.r)
			}
			if err := run.take(a); err != nil {
				return err
			}
		case sopAdvance:
			step := int(next()) % (len(fuzzStackSteps) + 1)
			target := run.now
			if step < len(fuzzStackSteps) {
				target += fuzzStackSteps[step]
			} else if run.wake >= 0 {
				target = run.wake
			}
			for k := 0; run.wake >= 0 && run.wake <= target && k < 64; k++ {
				run.now = max(run.now, run.wake)
				if err := run.take(s.Tick(run.now)); err != nil {
					return err
				}
			}
			if run.wake < 0 || run.wake > target {
				run.now = max(run.now, target) // else stay: a driver never skips a wake-up
			}
		case sopLimit:
			g := int(next()) % len(groups)
			l := throttle.Limits{RBPS: fuzzStackBPS[int(next())%len(fuzzStackBPS)], WBPS: fuzzStackBPS[int(next())%len(fuzzStackBPS)],
				RIOPS: fuzzStackIOPS[int(next())%len(fuzzStackIOPS)], WIOPS: fuzzStackIOPS[int(next())%len(fuzzStackIOPS)]}
			path := fuzzStackPaths[g]
			if s.CheckLimits(map[string]throttle.Limits{path: l}) != nil {
				break
			}
			if err := run.take(s.SetLimits(run.now, path, l)); err != nil {
				return err
			}
		case sopCancel:
			k := int(next())
			var waiting []*stackReq
			for _, r := range run.reqs {
				if !r.done {
					waiting = append(waiting, r)
				}
			}
			if len(waiting) == 0 {
				break
			}
			r := waiting[k%len(waiting)]
			r.cancelled = true
			if err := run.take(s.Cancel(run.now, r.r)); err != nil {
				return err
			}
		}
	}
	// Follow the wake-ups until every request has finished.
	for k := 0; ; k++ {
		waiting := 0
		for _, r := range run.reqs {
			if !r.done {
				waiting++
			}
		}
		if waiting == 0 {
			return nil
		}
		if run.wake < 0 || k > 100_000 {
			return fmt.Errorf("t=%d: %d requests never finish (wake %d after %d wake-ups)", run.now, waiting, run.wake, k)
		}
		run.now = max(run.now, run.wake)
		if err := run.take(run.s.Tick(run.now)); err != nil {
			return err
		}
	}
}

// take acts on a as the driver does, the device completing every I/O at
// once, and checks what finished.
func (run *stackRun) take(a Actions) error {
	for len(a.Start) > 0 || len(a.Done) > 0 {
		if err := run.finished(a.Done); err != nil {
			return err
		}
		run.wake = a.Wake
		start := append([]*IO(nil), a.Start...)
		a = Actions{Wake: run.wake}
		for _, io := range start {
			var b Actions
			if io.Op == OpRead {
				var pages [][]byte
				for off := io.Off; off < min(io.Off+io.Len, fuzzStackFile); off += PageSize {
					pages = append(pages, run.page[:min(PageSize, fuzzStackFile-off)])
				}
				b = run.s.Complete(run.now, io, pages, nil)
			} else {
				b = run.s.Wrote(run.now, io, io.Len, nil)
			}
			a.Start = append(a.Start, b.Start...)
			a.Done = append(a.Done, b.Done...)
			a.Wake = b.Wake
		}
	}
	run.wake = a.Wake
	waiting := false
	for _, r := range run.reqs {
		if !r.done {
			waiting = true
			// With an instant device, a request waits only for the
			// throttle, and never past the cap.
			if run.maxWait > 0 && run.now >= r.arrived+run.maxWait && !r.cancelled {
				return fmt.Errorf("t=%d: request %d (arrived %d, %d B) still waits past the cap %d", run.now, r.id, r.arrived, r.n, run.maxWait)
			}
		}
	}
	if run.wake != -1 && run.wake < run.now {
		return fmt.Errorf("t=%d: wake-up %d in the past", run.now, run.wake)
	}
	if waiting && run.wake == -1 {
		return fmt.Errorf("t=%d: requests wait, no wake-up", run.now)
	}
	return nil
}

func (run *stackRun) finished(done []*Request) error {
	for _, d := range done {
		r := run.byReq[d]
		if r == nil {
			return fmt.Errorf("t=%d: a request never issued finished", run.now)
		}
		if r.done {
			return fmt.Errorf("t=%d: request %d finished twice", run.now, r.id)
		}
		r.done = true
		if r.cancelled {
			continue
		}
		if d.Err != nil || d.Size() <= 0 || d.Size() > r.n {
			return fmt.Errorf("t=%d: request %d of %d B finished with %d B, err %v", run.now, r.id, r.n, d.Size(), d.Err)
		}
		if run.maxWait > 0 && run.now > r.arrived+run.maxWait {
			return fmt.Errorf("t=%d: request %d finished %d ns after it arrived, past the cap %d", run.now, r.id, run.now-r.arrived, run.maxWait)
		}
	}
	return nil
}
