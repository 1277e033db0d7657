package fsys

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Requests held in SOURCE. A backing call that never returns (a hung
// network file system, a disk that stopped answering) holds the request
// it serves, and the FUSE library's goroutine serving it. The kernel
// would keep that request's caller unkillable, and the library's
// Unmount and Wait would wait for that goroutine, for as long. So a
// caller being killed is answered EINTR (flights.sweep), and once the
// kernel has ended the mount, Unmount and Wait give such requests
// StuckWait before they go on without them.

// StuckWait is how long Unmount and Wait wait, once the kernel has ended
// the mount, for requests still held in SOURCE.
const StuckWait = 5 * time.Second

// watch starts, given the mount's FUSE device, the sweep that answers
// the interrupted requests held in SOURCE (if sweep: not over io_uring,
// whose requests can be answered in their ring entries only), and keeps
// the device to tell when the kernel has ended the mount (connGone).
func (f *FS) watch(dev *os.File, sweep bool) {
	rc, err := dev.SyscallConn()
	if err != nil {
		return
	}
	f.devConn = rc
	if r := replier(dev, &f.late); r != nil && sweep {
		go f.flights.sweepInterrupts(f.stop, func(unique uint64, errno syscall.Errno) error { return r(unique, errno, nil) }, dying)
	}
}

// connGone reports whether the kernel has ended the mount's FUSE
// connection (unmounted, aborted): its device then polls as an error,
// or the FUSE library has closed it. It is false when the device is not
// known.
func (f *FS) connGone() bool {
	if f.devConn == nil {
		return false
	}
	gone := false
	err := f.devConn.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd)}}
		n, err := unix.Poll(p, 0)
		gone = err == nil && n > 0 && p[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0
	})
	return err != nil || gone
}

// untilServed waits until done is closed or, once the kernel has ended
// the mount, StuckWait at most; it reports whether done was closed.
func (f *FS) untilServed(done <-chan struct{}) bool {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var giveUp <-chan time.Time
	for {
		select {
		case <-done:
			return true
		case <-giveUp:
			if f.heldBehind.CompareAndSwap(false, true) {
				f.log().Warn("the mount has ended with requests held in SOURCE; going on without them",
					"in_flight", fmt.Sprint(f.InFlight()))
			}
			return false
		case <-tick.C:
			if giveUp == nil && f.connGone() {
				if f.heldBehind.Load() {
					return false // Unmount waited already
				}
				giveUp = time.After(StuckWait)
			}
		}
	}
}
