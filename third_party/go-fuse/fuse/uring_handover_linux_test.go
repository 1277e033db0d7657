// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

// In a file of its own, named so that it runs after the tests of the
// other files but uring_linux_test.go, like the other tests serving
// over io_uring: TestMaxReaders, run after one of them (TestIOUring
// just as well, without this change), sees its writes interrupted
// (EINTR).

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHandoverIOUring: a server served over io_uring refuses to hand
// over, and serves on.
func TestHandoverIOUring(t *testing.T) {
	enableURing(t)
	var l handoverLog
	defer l.check(t)
	fs := newHandoverFS()
	opts := handoverOptions(&l)
	opts.IOUring = true
	srv, mnt, served := handoverMount(t, fs, opts)
	defer func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("Unmount: %v", err)
		}
		handoverWaitClosed(t, "return of Serve after Unmount", served)
	}()
	if !srv.IOUring() {
		t.Skip("skipping: the kernel did not grant io_uring")
	}
	if _, err := srv.Handover(time.Second); err == nil || !strings.Contains(err.Error(), "/dev/fuse") {
		t.Errorf("Handover over io_uring: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mnt, "file"), &st); err != nil {
		t.Fatalf("stat after the refused Handover: %v", err)
	}
}
