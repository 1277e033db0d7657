package engine

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// alarm calls its function once at the time it was last armed for.
type alarm interface {
	// arm sets the alarm to go off d from now, replacing any earlier
	// setting; d <= 0 is at once.
	arm(d time.Duration)
	// stop disarms it for good.
	stop()
}

// fdAlarm is a timerfd read through the runtime's poller: it wakes when the
// kernel's timer fires, not at the poller's next whole millisecond.
type fdAlarm struct {
	fd int
	f  *os.File
}

func newFDAlarm(fn func()) (*fdAlarm, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	a := &fdAlarm{fd: fd, f: os.NewFile(uintptr(fd), "sluice-alarm")}
	go func() {
		var b [8]byte
		for {
			if _, err := a.f.Read(b[:]); err != nil {
				return // stopped
			}
			fn()
		}
	}()
	return a, nil
}

func (a *fdAlarm) arm(d time.Duration) {
	// A zero expiry disarms a timerfd: at once is one nanosecond.
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(max(int64(d), 1))}
	unix.TimerfdSettime(a.fd, 0, &its, nil)
}

func (a *fdAlarm) stop() { a.f.Close() }

// goAlarm is a Go timer.
type goAlarm struct{ t *time.Timer }

func newGoAlarm(fn func()) *goAlarm {
	t := time.AfterFunc(time.Hour, fn)
	t.Stop()
	return &goAlarm{t}
}

func (a *goAlarm) arm(d time.Duration) { a.t.Reset(d) }
func (a *goAlarm) stop()               { a.t.Stop() }
