package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tenantTree skips the test unless it can mount and run the daemon under
// prlimit, whose path it returns with a source holding a file f and a
// directory d of 20 entries, and a mount point.
func tenantTree(t *testing.T) (prlimit, src, mnt string) {
	t.Helper()
	needMount(t)
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("skipping: no prlimit (util-linux)")
	}
	_, src, mnt = srcMnt(t)
	os.WriteFile(filepath.Join(src, "f"), []byte("a tenant's file\n"), 0o644)
	os.Mkdir(filepath.Join(src, "d"), 0o755)
	for i := range 20 {
		os.WriteFile(filepath.Join(src, "d", strconv.Itoa(i)), nil, 0o644)
	}
	return prlimit, src, mnt
}

// TestGroupMaxOpen: a tenant opening a file 1000 times and holding the
// opens gets EMFILE at --group-max-open, while another group's tenant
// still opens and lists through the mount, with the daemon's descriptor
// limit at 256; the first tenant opens again once it closes one.
func TestGroupMaxOpen(t *testing.T) {
	prlimit, src, mnt := tenantTree(t)
	const limit, quota, opens = 256, 100, 1000
	cmd := sluice("mount", "--group", "a uid=4101", "--group", "b uid=4102", "--group-max-open", strconv.Itoa(quota), src, mnt)
	cmd.Path, cmd.Args = prlimit, append([]string{"prlimit", fmt.Sprintf("--nofile=%d:%d", limit, limit), "--"}, cmd.Args...)
	_, stderr, _, _ := startCmd(t, mnt, cmd)

	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	var stop error
	asFSUID(4101, func() {
		for len(held) < opens {
			f, err := os.Open(filepath.Join(mnt, "f"))
			if err != nil {
				stop = err
				return
			}
			held = append(held, f)
		}
	})
	t.Logf("uid 4101 (group a) holds %d opens of f, then: %v", len(held), stop)
	if len(held) != quota || !errors.Is(stop, syscall.EMFILE) {
		t.Errorf("uid 4101 held %d opens, then %v; want %d, then EMFILE", len(held), stop, quota)
	}

	for _, args := range [][]string{{"cat", filepath.Join(mnt, "f")}, {"ls", filepath.Join(mnt, "d")}} {
		c := exec.Command(args[0], args[1:]...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4102, Gid: 4102}}
		if out, err := c.CombinedOutput(); err != nil {
			t.Errorf("uid 4102 (group b) while group a holds its opens: %v: %v\n%s", args, err, out)
		}
	}

	held[len(held)-1].Close()
	held = held[:len(held)-1]
	// The kernel sends the release after close(2) has returned: the open
	// it frees is free once sluice has it.
	var again error
	for deadline := time.Now().Add(5 * time.Second); ; {
		asFSUID(4101, func() {
			var f *os.File
			if f, again = os.Open(filepath.Join(mnt, "f")); again == nil {
				held = append(held, f)
			}
		})
		if !errors.Is(again, syscall.EMFILE) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if again != nil {
		t.Errorf("uid 4101 after closing one: %v", again)
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
}

// asFSUID runs fn on a thread whose file system uid and gid are id, so
// FUSE sees it as that user; the descriptors it opens are the process's.
func asFSUID(id int, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with us
		unix.Setfsgid(id)
		unix.Setfsuid(id)
		fn()
	}()
	<-done
}
