package fsys

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// dying reports whether the caller of an interrupted request is being
// killed: SIGKILL is pending for its thread or its process, as it is for
// every thread of a process that a fatal signal is taking down. A caller
// the kernel did not name, or whose thread is gone, counts as dying.
func dying(ctx context.Context) bool {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Pid == 0 {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(c.Pid), 10) + "/status")
	if err != nil {
		return true
	}
	return killPending(b)
}

// killPending reports whether a /proc/PID/status text shows SIGKILL among
// the thread's or the process's pending signals.
func killPending(status []byte) bool {
	const sigkill = 1 << (9 - 1)
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Text()
		for _, key := range []string{"SigPnd:", "ShdPnd:"} {
			if v, ok := strings.CutPrefix(line, key); ok {
				mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil || mask&sigkill != 0 {
					return true
				}
			}
		}
	}
	return false
}
