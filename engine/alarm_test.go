package engine

import (
	"slices"
	"testing"
	"time"
)

// TestFDAlarm: the timerfd alarm goes off once per arming, a later arming
// replaces an earlier one, arming in the past goes off at once, and a
// stopped alarm stays quiet.
func TestFDAlarm(t *testing.T) {
	fired := make(chan time.Time, 10)
	a, err := newFDAlarm(func() { fired <- time.Now() })
	if err != nil {
		t.Skipf("no timerfd: %v", err)
	}
	wait := func(what string) time.Time {
		t.Helper()
		select {
		case at := <-fired:
			return at
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the alarm never went off", what)
		}
		return time.Time{}
	}
	start := time.Now()
	a.arm(time.Hour)
	a.arm(2 * time.Millisecond) // replaces the hour
	if at := wait("armed for 2ms"); at.Sub(start) < 2*time.Millisecond {
		t.Errorf("went off after %v, before its time", at.Sub(start))
	}
	a.arm(-time.Second)
	wait("armed in the past")
	a.arm(time.Millisecond)
	a.stop()
	select {
	case <-fired:
		t.Error("a stopped alarm went off")
	case <-time.After(20 * time.Millisecond):
	}
	if len(fired) != 0 {
		t.Errorf("%d extra wake-ups", len(fired))
	}
}

// TestFDAlarmWhileRunning: an expiry that comes while the alarm's
// function still runs for the one before is not lost.
func TestFDAlarmWhileRunning(t *testing.T) {
	fired := make(chan int, 10)
	hold := make(chan struct{})
	n := 0
	a, err := newFDAlarm(func() {
		n++
		fired <- n
		if n == 1 {
			<-hold
		}
	})
	if err != nil {
		t.Skipf("no timerfd: %v", err)
	}
	defer a.stop()
	wait := func(want int) {
		t.Helper()
		select {
		case got := <-fired:
			if got != want {
				t.Fatalf("call %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d never came", want)
		}
	}
	a.arm(0)
	wait(1)
	a.arm(0) // expires while the first call is held
	time.Sleep(5 * time.Millisecond)
	close(hold)
	wait(2)
}

// BenchmarkAlarmLateness reports how late each kind of alarm wakes for
// waits of 100 µs to 500 µs, the spacing of 4 KiB requests at 8 to 40
// MiB/s: the median lateness as ns-late.
func BenchmarkAlarmLateness(b *testing.B) {
	for _, kind := range []string{"timerfd", "go-timer"} {
		b.Run(kind, func(b *testing.B) {
			fired := make(chan time.Time, 1)
			fn := func() { fired <- time.Now() }
			var a alarm
			if kind == "timerfd" {
				fa, err := newFDAlarm(fn)
				if err != nil {
					b.Skip(err)
				}
				a = fa
			} else {
				a = newGoAlarm(fn)
			}
			defer a.stop()
			var late []time.Duration
			i := 0
			for b.Loop() {
				d := time.Duration(100+i%5*100) * time.Microsecond
				i++
				start := time.Now()
				a.arm(d)
				late = append(late, (<-fired).Sub(start)-d)
			}
			slices.Sort(late)
			b.ReportMetric(float64(late[len(late)/2]), "ns-late")
		})
	}
}
