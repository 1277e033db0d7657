package fsys

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestListTrustedXattr: trusted.* names are listed to a caller holding
// CAP_SYS_ADMIN and to no other, whatever its uid, as on SOURCE: root
// without the capability does not see them, a non-root caller with it
// does. Each caller lists the file through the mount and on SOURCE, and
// gets the same names.
func TestListTrustedXattr(t *testing.T) {
	src, mnt, _ := mount(t, Options{AllowOther: true})
	p := filepath.Join(src, "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, x := range [][2]string{{"user.y", "shown"}, {"trusted.sluice", "hidden"}} {
		if err := unix.Lsetxattr(p, x[0], []byte(x[1]), 0); err != nil {
			t.Skipf("skipping: SOURCE takes no %s: %v", x[0], err)
		}
	}
	const (
		all   = "ok trusted.sluice,user.y"
		plain = "ok user.y"
	)
	for _, c := range []struct {
		name     string
		uid      int
		sysAdmin bool
		want     string // on SOURCE
	}{
		{"root", 0, true, all},
		{"root without CAP_SYS_ADMIN", 0, false, plain},
		{"uid 4101 with CAP_SYS_ADMIN", 4101, true, all},
		{"uid 4101", 4101, false, plain},
	} {
		var direct, through string
		err := asCaps(c.uid, c.sysAdmin, func() {
			direct = listXattr(p)
			through = listXattr(filepath.Join(mnt, "f"))
		})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if direct != c.want {
			t.Fatalf("%s on SOURCE lists %q; the test expects %q", c.name, direct, c.want)
		}
		if through != direct {
			t.Errorf("%s lists %q through the mount, %q on SOURCE", c.name, through, direct)
		}
	}

	// uid 4101 in a user namespace of its own holds every capability
	// there (CapEff all set), none on SOURCE's file system.
	bin := filepath.Join(filepath.Dir(src), "fsys.test")
	copyExe(t, os.Args[0], bin)
	cmd := exec.Command(bin, "-test.run=^TestListTrustedXattrHelper$")
	cmd.Env = append(os.Environ(), "SLUICE_LISTXATTR="+p+"\n"+filepath.Join(mnt, "f"))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 4101, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 4101, Size: 1}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0},
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("listing in a user namespace: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var capEff uint64
	if len(lines) != 3 || func() error { _, err := fmt.Sscanf(lines[0], "CapEff: %x", &capEff); return err }() != nil || capEff&(1<<21) == 0 {
		t.Fatalf("the helper in a user namespace printed %q; want CAP_SYS_ADMIN in its CapEff, then two lists", out)
	}
	if lines[1] != plain || lines[2] != lines[1] {
		t.Errorf("uid 4101 in a user namespace of its own (%s) lists %q through the mount, %q on SOURCE; want %q", lines[0], lines[2], lines[1], plain)
	}
}

// TestListTrustedXattrHelper is TestListTrustedXattr's process in a user
// namespace: it prints its effective capabilities, then the xattr names
// of each path in $SLUICE_LISTXATTR, one a line. Skipped otherwise.
func TestListTrustedXattrHelper(t *testing.T) {
	paths := os.Getenv("SLUICE_LISTXATTR")
	if paths == "" {
		t.Skip("a helper process of TestListTrustedXattr")
	}
	b, _ := os.ReadFile("/proc/self/status")
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			fmt.Println("CapEff:", strings.TrimSpace(v))
		}
	}
	for _, p := range strings.Split(paths, "\n") {
		fmt.Println(listXattr(p))
	}
	os.Exit(0)
}

// copyExe copies the executable from to to, where other users may run it.
func copyExe(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// asCaps runs fn on a fresh OS thread whose real, effective, saved and
// file system ids are uid and whose only capability, if sysAdmin, is
// CAP_SYS_ADMIN (effective and permitted; none otherwise). The thread
// ends with fn (it is never unlocked).
func asCaps(uid int, sysAdmin bool, fn func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		// Per-thread calls only: the syscall package's set*id change every
		// thread of the process.
		if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 1, 0, 0, 0, 0); e != 0 {
			errc <- fmt.Errorf("PR_SET_KEEPCAPS: %w", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			errc <- fmt.Errorf("setgroups: %w", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			errc <- fmt.Errorf("setresgid %d: %w", uid, e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			errc <- fmt.Errorf("setresuid %d: %w", uid, e)
			return
		}
		const capSysAdmin = 21
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if sysAdmin {
			data[0].Effective = 1 << capSysAdmin
			data[0].Permitted = 1 << capSysAdmin
		}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- fmt.Errorf("capset: %w", err)
			return
		}
		b, err := os.ReadFile("/proc/thread-self/status")
		if err != nil {
			errc <- err
			return
		}
		wantCap := uint64(0)
		if sysAdmin {
			wantCap = 1 << capSysAdmin
		}
		id := strconv.Itoa(uid)
		for _, want := range []string{
			"Uid:\t" + id + "\t" + id + "\t" + id + "\t" + id + "\n",
			fmt.Sprintf("CapEff:\t%016x\n", wantCap),
		} {
			if !strings.Contains(string(b), want) {
				errc <- fmt.Errorf("the thread's status has no %q:\n%s", want, b)
				return
			}
		}
		fn()
		errc <- nil
	}()
	return <-errc
}
