package group

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
)

// These tests read the real /proc about the test process itself.

func TestProcSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	pid := int32(os.Getpid())

	comm, err := ReadComm(pid)
	want := filepath.Base(os.Args[0])
	if len(want) > maxComm {
		want = want[:maxComm]
	}
	if err != nil || comm != want {
		t.Errorf("ReadComm(self) = %q, %v; want %q", comm, err, want)
	}

	gids, err := ReadGroups(pid)
	osGids, _ := os.Getgroups()
	var wantGids []uint32
	for _, g := range osGids {
		wantGids = append(wantGids, uint32(g))
	}
	slices.Sort(gids)
	slices.Sort(wantGids)
	if err != nil || !slices.Equal(gids, wantGids) {
		t.Errorf("ReadGroups(self) = %v, %v; want %v", gids, err, wantGids)
	}

	cgs, err := ReadCgroups(pid)
	if err != nil || len(cgs) == 0 {
		t.Errorf("ReadCgroups(self) = %q, %v; want at least one path", cgs, err)
	}
	for _, p := range cgs {
		if p == "" || p[0] != '/' {
			t.Errorf("ReadCgroups(self): path %q is not absolute", p)
		}
	}

	if got, err := Tgid(pid); err != nil || got != pid {
		t.Errorf("Tgid(pid) = %d, %v; want %d", got, err, pid)
	}

	// A thread other than the main one maps to the process. Two goroutines
	// locked to threads at once are on two threads, so at least one of them
	// is not the main thread.
	tids := make(chan int32, 2)
	release := make(chan struct{})
	for range 2 {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids <- int32(syscall.Gettid())
			<-release
		}()
	}
	a, b := <-tids, <-tids
	defer close(release) // the threads stay alive while Tgid reads them
	tid := a
	if tid == pid {
		tid = b
	}
	if tid == pid || a == b {
		t.Fatalf("threads %d and %d; want two threads, one not the main one (%d)", a, b, pid)
	}
	if got, err := Tgid(tid); err != nil || got != pid {
		t.Errorf("Tgid(%d) = %d, %v; want %d", tid, got, err, pid)
	}

	f, err := ReadFacts(pid, Need{Comm: true, Cgroups: true, Groups: true})
	if err != nil || f.Comm != comm || !slices.Equal(f.Cgroups, cgs) {
		t.Errorf("ReadFacts(self) = %+v, %v", f, err)
	}
}

func TestProcErrors(t *testing.T) {
	for _, id := range []int32{0, -1} {
		if _, err := Tgid(id); err == nil {
			t.Errorf("Tgid(%d) succeeded", id)
		}
		if _, err := ReadComm(id); err == nil {
			t.Errorf("ReadComm(%d) succeeded", id)
		}
		if _, err := ReadCgroups(id); err == nil {
			t.Errorf("ReadCgroups(%d) succeeded", id)
		}
		if _, err := ReadGroups(id); err == nil {
			t.Errorf("ReadGroups(%d) succeeded", id)
		}
	}
	// Beyond the kernel's pid_max (at most 2^22), so no such process.
	if _, err := Tgid(1 << 30); err == nil {
		t.Errorf("Tgid of a missing thread succeeded")
	}
	f, err := ReadFacts(1<<30, Need{Comm: true, Groups: true})
	if err == nil || f.Comm != "" || f.Groups != nil {
		t.Errorf("ReadFacts(missing) = %+v, %v", f, err)
	}
}
