// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"syscall"
	"testing"
	"time"
)

// TestMaxReaders: with MaxReaders set, every one of more requests than
// that, all held in the file system at once, still reaches it (a reader
// that takes a request starts another when none is left), and once they
// are answered exactly MaxReaders readers wait for the next, never more.
// Without it, as many wait as came back (up to GOMAXPROCS plus one).
func TestMaxReaders(t *testing.T) {
	const held = 6
	for _, max := range []int{1, 2} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			if got := readersAfter(t, max, held); got != max {
				t.Errorf("MaxReaders %d: %d readers wait after %d requests, want %d", max, got, held, max)
			}
		})
	}
	t.Run("default", func(t *testing.T) {
		if got := readersAfter(t, 0, held); got <= 2 {
			t.Errorf("MaxReaders unset: %d readers wait after %d requests, want more than 2", got, held)
		}
	})
}

// readersAfter mounts a file system whose writes are held until
// released, with MaxReaders max, sends it n writes at once, waits until
// all n are held, releases them, and returns how many readers wait once
// the count settles, failing if it is ever above max (where max is set).
func readersAfter(t *testing.T, max, n int) int {
	const maxWrite = 4096
	fs := newBlockingWriteFS()
	mnt := t.TempDir()
	srv, err := NewServer(fs, mnt, &MountOptions{
		MaxWrite:   maxWrite,
		MaxReaders: max,
		Logger:     log.New(io.Discard, "", 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		fs.unblock()
		if err := srv.Unmount(); err != nil {
			t.Errorf("Unmount: %v", err)
		}
	}()
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	readers := func() int {
		srv.fuseFD.reqMu.Lock()
		defer srv.fuseFD.reqMu.Unlock()
		return srv.fuseFD.reqReaders
	}

	fds := make([]int, n)
	for i := range fds {
		fd, err := syscall.Open(mnt+"/file", syscall.O_WRONLY, 0)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		fds[i] = fd
		defer syscall.Close(fd)
	}
	payload := bytes.Repeat([]byte("x"), maxWrite)
	results := make(chan error, n)
	for i, fd := range fds {
		go func(fd int, off int64) {
			_, err := syscall.Pwrite(fd, payload, off)
			results <- err
		}(fd, int64(i*maxWrite))
	}
	waitWriteEnteredSet(t, fs.entered, n, map[uint64]bool{})
	fs.unblock()
	for i := 0; i < n; i++ {
		if err := waitWriteResult(results); err != nil {
			t.Fatalf("write %d: %v", i+1, err)
		}
	}

	// The handlers come back to read; those past the limit exit.
	last, same := -1, 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && same < 50; {
		r := readers()
		if max > 0 && r > max {
			t.Fatalf("MaxReaders %d: %d readers wait", max, r)
		}
		if r == last {
			same++
		} else {
			last, same = r, 0
		}
		time.Sleep(time.Millisecond)
	}
	return last
}
