package control

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// handing is a target whose mount can be handed over: its state is a
// word, and its descriptors a pipe's read end and as many copies of
// /dev/null as asked.
type handing struct {
	target
	mu      sync.Mutex
	events  []string
	extra   int
	refuse  error
	aborted chan string
	done    chan struct{}
}

func (h *handing) event(e string) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

func (h *handing) Handover(taker int) (*Handing, error) {
	if h.refuse != nil {
		return nil, h.refuse
	}
	if taker != os.Getpid() {
		return nil, fmt.Errorf("the taker is pid %d, want this process, %d", taker, os.Getpid())
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	w.WriteString("the mount")
	w.Close()
	fd, _ := unix.Dup(int(r.Fd()))
	r.Close()
	fds := []int{fd}
	for range h.extra {
		n, _ := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		fds = append(fds, n)
	}
	return &Handing{State: h.state(), Fds: fds,
		Commit: func() { h.event("commit") },
		Done:   func() { h.event("done"); close(h.done) },
		Abort:  func(reason string) { h.event("abort"); h.aborted <- reason },
	}, nil
}

// state is the state handed over: a word, or 8 MiB (more than a stream
// socket takes in one write) when many descriptors go with it.
func (h *handing) state() []byte {
	if h.extra > 0 {
		return bytes.Repeat([]byte("state"), 8<<20/5)
	}
	return []byte("state")
}

func newHanding(t *testing.T, extra int) (*handing, string) {
	mp := t.TempDir()
	h := &handing{extra: extra, aborted: make(chan string, 1), done: make(chan struct{})}
	srv, err := Listen(mp, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return h, mp
}

// TestHandover: a mount's state and descriptors reach the taking process
// (more than one message of them), the handing process commits only once
// told, its socket is gone before it is done, and the descriptors work in
// the taker.
func TestHandover(t *testing.T) {
	h, mp := newHanding(t, 300)
	tk, err := Takeover(mp)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFds(tk.Fds)
	if !bytes.Equal(tk.State, h.state()) || len(tk.Fds) != 301 {
		t.Fatalf("took %d bytes of state and %d descriptors, want %d and 301", len(tk.State), len(tk.Fds), len(h.state()))
	}
	h.mu.Lock()
	if len(h.events) != 0 {
		t.Errorf("before the verdict the handing process did %v", h.events)
	}
	h.mu.Unlock()
	b := make([]byte, 64)
	n, err := unix.Read(tk.Fds[0], b)
	if err != nil || string(b[:n]) != "the mount" {
		t.Errorf("read %q, %v through the descriptor taken, want %q", b[:n], err, "the mount")
	}
	if err := tk.Taken(); err != nil {
		t.Fatal(err)
	}
	<-h.done
	if !slices.Equal(h.events, []string{"commit", "done"}) {
		t.Errorf("the handing process did %v, want commit then done", h.events)
	}
	if _, err := Stat(mp); !errors.Is(err, ErrNoMount) {
		t.Errorf("after the handover the old socket answers: %v", err)
	}
}

// TestHandoverAbort: a taker that says no, or goes away, leaves the
// handing process serving, told why.
func TestHandoverAbort(t *testing.T) {
	h, mp := newHanding(t, 0)
	tk, err := Takeover(mp)
	if err != nil {
		t.Fatal(err)
	}
	closeFds(tk.Fds)
	tk.Abort("SOURCE differs")
	if r := <-h.aborted; r != "SOURCE differs" {
		t.Errorf("aborted with %q", r)
	}
	if _, err := Stat(mp); err != nil {
		t.Errorf("after an abort the socket does not answer: %v", err)
	}
	tk, err = Takeover(mp)
	if err != nil {
		t.Fatal(err)
	}
	closeFds(tk.Fds)
	tk.c.Close()
	if r := <-h.aborted; r == "" {
		t.Error("a taker that went away left no reason")
	}
	if !slices.Equal(h.events, []string{"abort", "abort"}) {
		t.Errorf("the handing process did %v", h.events)
	}
}

// TestHandoverRefused: a mount that cannot be handed over says why, and
// a target that knows no handover says so.
func TestHandoverRefused(t *testing.T) {
	h, mp := newHanding(t, 0)
	h.refuse = errors.New("a mirror set cannot be handed over yet")
	if _, err := Takeover(mp); err == nil || err.Error() != h.refuse.Error() {
		t.Errorf("Takeover = %v, want %v", err, h.refuse)
	}
	mp2 := t.TempDir()
	srv, err := Listen(mp2, &target{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := Takeover(mp2); err == nil {
		t.Error("a target without handover handed over")
	}
}
