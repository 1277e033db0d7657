package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/control"
)

// startSupervised starts sluice mount --supervise with args (SOURCE and
// MOUNTPOINT last) and returns once the mount serves.
func startSupervised(t *testing.T, mnt string, args ...string) serving {
	t.Helper()
	cmd := sluice(append([]string{"mount", "--supervise"}, args...)...)
	log := &safeBuffer{}
	exited, waitErr := runCmd(t, cmd, log)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := control.Stat(mnt); err == nil && isMounted(mnt) {
			break
		}
		select {
		case <-exited:
			t.Fatalf("sluice mount --supervise exited: %v\n%s", *waitErr, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 10 s:\n%s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return serving{log, exited, waitErr}
}

// children are the pids of pid's children (of all its threads: each
// lists those it started).
func children(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("the threads of pid %d: %v", pid, err)
	}
	var pids []int
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
	}
	return pids
}

// supervisedChild returns the pid of the sluice serving a supervised
// mount, the child of the supervisor pid.
func supervisedChild(t *testing.T, pid int) int {
	t.Helper()
	c := children(t, pid)
	if len(c) != 1 {
		t.Fatalf("the supervisor has children %v, want one", c)
	}
	return c[0]
}

// crash kills the sluice serving a supervised mount with SIGKILL, and
// returns once another serves it: the n-th since the mount started.
func crash(t *testing.T, sup int, s serving, n int) {
	t.Helper()
	child := supervisedChild(t, sup)
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitLog(t, s, "serving, taken over after a crash", n)
}

// waitLog waits until the log of s holds what n times, 10 s at most.
func waitLog(t *testing.T, s serving, what string, n int) {
	t.Helper()
	waitLogWithin(t, s, what, n, 10*time.Second)
}

// waitLogWithin is waitLog within d; it fails at once should the process
// of s exit meanwhile.
func waitLogWithin(t *testing.T, s serving, what string, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for strings.Count(s.log.String(), what) < n {
		select {
		case <-s.exited:
			t.Fatalf("sluice exited before its log said %q %d times: %v\n%s", what, n, *s.waitErr, s.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q not %d times in the log after %v:\n%s", what, n, d, s.log)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSupervise: the sluice serving a supervised mount is killed with
// SIGKILL three times while a tenant of another uid, in a limited group,
// holds a file open for reading, one for appending and a directory half
// listed, and works in the mount: none of its operations fails, its
// appends are all there once each and in order, its listing has every
// name once, and the limits (a set made at run time among them) hold in
// each new sluice. SIGTERM to the supervisor then unmounts, and it exits
// 0.
func TestSupervise(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	exe := tenantExe(t, dir)
	fillTenantTree(t, src)
	s := startSupervised(t, mnt, "--limit", "tenants/a rbps=8MiB", "--group", "tenants/a uid=4243", src, mnt)
	if out, err := sluice("set", mnt, "default wiops=500").CombinedOutput(); err != nil {
		t.Fatalf("set: %v\n%s", err, out)
	}
	stop := startTenant(t, exe, mnt)
	sup := supervisorOf(t)
	if st, err := control.Stat(mnt); err != nil || st.Supervised == nil || st.Supervised.Pid != sup || st.Supervised.Crashes != 0 {
		t.Errorf("stat before a crash: %v, supervised %+v; want by pid %d, no crash", err, st.Supervised, sup)
	}
	for i := 1; i <= 3; i++ {
		time.Sleep(300 * time.Millisecond) // the tenant at work
		crash(t, sup, s, i)
	}
	time.Sleep(300 * time.Millisecond)
	st, err := control.Stat(mnt)
	if err != nil {
		t.Fatalf("stat after the crashes: %v", err)
	}
	if g := find(st, "default"); g == nil || !strings.Contains(g.Limits, "wiops=500") {
		t.Errorf("the limit set at run time did not hold through the crashes: %+v", g)
	}
	if g := find(st, "tenants/a"); g == nil || !strings.Contains(g.Limits, "rbps=8MiB") {
		t.Errorf("the command line's limit did not hold through the crashes: %+v", g)
	}
	if sv := st.Supervised; sv == nil || sv.Pid != sup || sv.Crashes != 3 || time.Since(sv.LastCrash) > time.Minute {
		t.Errorf("stat after three crashes says supervised %+v, want by pid %d, 3 crashes, the last just now", sv, sup)
	}
	if out, err := sluice("stat", mnt).CombinedOutput(); err != nil || !strings.Contains(string(out), fmt.Sprintf("supervised by pid %d: survived 3 crashes", sup)) {
		t.Errorf("sluice stat: %v, want it to say the mount survived 3 crashes\n%s", err, out)
	}
	res := stop()
	checkAppends(t, filepath.Join(src, "own", "log"), res.Appends)
	// SIGUSR2 restarts the serving sluice from the binary on disk, the
	// same way (an upgrade).
	if err := syscall.Kill(sup, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitLog(t, s, "serving, taken over after a crash", 4)
	if b, err := os.ReadFile(filepath.Join(mnt, "data")); err != nil || len(b) != takeoverFile {
		t.Errorf("reading through the mount after the upgrade: %d bytes, %v", len(b), err)
	}
	if err := syscall.Kill(sup, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the supervisor did not exit on SIGTERM:\n%s", s.log)
	}
	if *s.waitErr != nil {
		t.Errorf("the supervisor exited with %v:\n%s", *s.waitErr, s.log)
	}
	if isMounted(mnt) {
		t.Error("still mounted after SIGTERM")
	}
}

// supervisorOf is the pid of the supervisor this test started.
func supervisorOf(t *testing.T) int {
	t.Helper()
	for _, pid := range children(t, os.Getpid()) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "--supervise") {
			return pid
		}
	}
	t.Fatal("no supervisor among this test's children")
	return 0
}

// fioKills is how many times TestSuperviseFio kills the serving sluice,
// one every 2 s: 30 makes the minute of the fault suite.
var fioKills = flag.Int("fio-kills", 5, "kills -9 in TestSuperviseFio, one every 2 s")

// TestSuperviseFio: the sluice serving a supervised mount is killed with
// SIGKILL every 2 s under TestTakeoverFio's two fio runs (a writer of
// random blocks verified with crc32c, unlimited; a reader held to 8 MiB/s):
// both end without an error or a block that fails to verify, and the
// reader's rate over the run stays at its limit. Without passthrough,
// every read and write is a request sluice serves, so kills land on
// requests being served.
func TestSuperviseFio(t *testing.T) {
	needMount(t)
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("skipping: fio is not installed")
	}
	for _, pass := range []string{"true", "false"} {
		t.Run("passthrough="+pass, func(t *testing.T) {
			_, src, mnt := srcMnt(t)
			prepareFioPair(t, src)
			s := startSupervised(t, mnt, "--passthrough="+pass, "--limit", "tenants/a rbps=8MiB", "--group", "tenants/a uid=4243", src, mnt)
			sup := supervisorOf(t)
			kills := *fioKills
			p := startFioPair(t, mnt, strconv.Itoa(2*kills+1)+"s")
			for i := 1; i <= kills; i++ {
				time.Sleep(2 * time.Second)
				crash(t, sup, s, i)
			}
			p.check(t, fmt.Sprintf("%d kills -9", kills), s.log, 0.95)
		})
	}
}

// TestSuperviseRefused: what cannot be supervised is refused with the
// flags named, and a mount that fails in the child (a SOURCE that is not
// there) fails the supervisor with the child's status and its reason.
func TestSuperviseRefused(t *testing.T) {
	needMount(t)
	dir, _, mnt := srcMnt(t)
	m1, m2 := filepath.Join(dir, "m1"), filepath.Join(dir, "m2")
	os.Mkdir(m1, 0o755)
	os.Mkdir(m2, 0o755)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--mirror", m1, "--mirror", m2, mnt}, 2, "--supervise with --mirror"},
		{[]string{filepath.Join(dir, "absent"), mnt}, 1, "SOURCE"},
	} {
		out, err := sluice(append([]string{"mount", "--supervise"}, c.args...)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("mount --supervise %v: %v, want exit %d saying %q:\n%s", c.args, err, c.code, c.want, out)
		}
		if isMounted(mnt) {
			t.Fatalf("mount --supervise %v mounted", c.args)
		}
	}
}

// TestSuperviseService: the unit's ExecStart, its config file saying
// supervise = true, run as a Type=notify service: READY=1 comes from the
// supervisor, the main process, once the mount serves and its control
// socket answers, and the child is not told of the service manager;
// after the serving process is killed the mount serves on with no new
// READY=1; SIGHUP to the main process reloads; SIGTERM says STOPPING=1,
// unmounts and exits 0.
func TestSuperviseService(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "hello"), []byte("hello"), 0o644)
	inst := "svc"
	os.WriteFile(filepath.Join(dir, inst+".toml"), []byte(fmt.Sprintf("source = %q\nmountpoint = %q\nsupervise = true\n", src, mnt)), 0o644)
	_, start := unitCommands(t, inst, "/usr/local/bin/sluice", os.Args[0], "/etc/sluice/", dir+"/")
	sock := filepath.Join(dir, "notify")
	msgs := notifyListener(t, sock)
	cmd := exec.Command(start[0][0], start[0][1:]...)
	cmd.Env = append(os.Environ(), "SLUICE_AS_MAIN=1", "NOTIFY_SOCKET="+sock)
	log := &safeBuffer{}
	exited, waitErr := runCmd(t, cmd, log)
	waitMsg := func(want string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m := <-msgs:
				if strings.Contains("\n"+m+"\n", "\n"+want+"\n") {
					return
				}
			case <-exited:
				t.Fatalf("the service exited before %s: %v\n%s", want, *waitErr, log)
			case <-timeout:
				t.Fatalf("no %s within 10 s:\n%s", want, log)
			}
		}
	}
	waitMsg("READY=1")
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "hello" {
		t.Fatalf("READY=1 came before the mount served: read %q, %v", b, err)
	}
	if _, err := control.Stat(mnt); err != nil {
		t.Fatalf("READY=1 came before the control socket answered: %v", err)
	}
	child := supervisedChild(t, cmd.Process.Pid)
	if env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", child)); strings.Contains(string(env), "NOTIFY_SOCKET=") {
		t.Error("the serving process was told of the service manager")
	}
	s := serving{log, exited, waitErr}
	crash(t, cmd.Process.Pid, s, 1)
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "hello" {
		t.Fatalf("after the crash: read %q, %v", b, err)
	}
	select {
	case m := <-msgs:
		t.Errorf("the service manager was told %q after the crash", m)
	default:
	}
	// SIGHUP to the main process reloads the config file, in the child.
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, s, "SIGHUP: reloaded", 1)
	cmd.Process.Signal(syscall.SIGTERM)
	waitMsg("STOPPING=1")
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the service did not exit on SIGTERM:\n%s", log)
	}
	if *waitErr != nil || isMounted(mnt) {
		t.Errorf("after SIGTERM: exit %v, mounted %v\n%s", *waitErr, isMounted(mnt), log)
	}
}
