package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFstabHelperLogPlanted: the helper run by a user without root logs
// to /tmp/sluice-UID; another user who plants that directory, or a
// symlink at the log's name, cannot have the helper truncate or write a
// file of the victim's. The helper refuses, saying why, and the file is
// unchanged.
func TestFstabHelperLogPlanted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: running as two other users needs root")
	}
	const attacker, victim = 4101, 4102
	dir, src, mnt := srcMnt(t)
	// The helper runs as the victim: a copy of the test binary it may run.
	bin := filepath.Join(dir, "sluice")
	copyFile(t, os.Args[0], bin, 0o755)
	precious := filepath.Join(dir, "precious")
	const content = "the victim's own data\n"
	if err := os.WriteFile(precious, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(precious, victim, victim)

	logDir := "/tmp/sluice-4102"
	logName := "mount." + strings.ReplaceAll(strings.Trim(mnt, "/"), "/", "-") + ".log"
	clean := func() {
		syscall.Unmount(mnt, syscall.MNT_DETACH)
		os.RemoveAll(logDir)
		os.RemoveAll(logDir + "-elsewhere")
	}
	clean()
	t.Cleanup(clean)
	as := func(uid int, name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/", "SLUICE_AS_MAIN=1"}
		return cmd
	}

	for _, tc := range []struct {
		name  string
		plant func() // as root, when the attack needs what only root may do
		sh    string // as the attacker
		want  string // in the helper's refusal
	}{
		{name: "directory of another user",
			sh:   "mkdir -m 777 " + logDir + " && ln -s " + precious + " " + logDir + "/" + logName,
			want: "belongs to uid 4101"},
		{name: "directory a symlink",
			sh: "mkdir -m 777 " + logDir + "-elsewhere && ln -s " + precious + " " + logDir + "-elsewhere/" + logName +
				" && ln -s " + logDir + "-elsewhere " + logDir,
			want: "is not a directory"},
		{name: "log a symlink", plant: func() {
			os.Mkdir(logDir, 0o700)
			os.Chown(logDir, victim, victim)
			os.Symlink(precious, filepath.Join(logDir, logName))
			os.Lchown(filepath.Join(logDir, logName), attacker, attacker)
		}, want: "symlink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clean()
			if tc.plant != nil {
				tc.plant()
			}
			if tc.sh != "" {
				if out, err := as(attacker, "sh", "-c", tc.sh).CombinedOutput(); err != nil {
					t.Fatalf("planting as uid %d: %v\n%s", attacker, err, out)
				}
			}
			helper := as(victim, bin, src, mnt, "-o", "nofail")
			helper.Args[0] = "mount.fuse.sluice"
			out, err := helper.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("helper as uid %d: %v, want a refusal saying %q\n%s", victim, err, tc.want, out)
			}
			t.Logf("refused: %s", out)
			if b, err := os.ReadFile(precious); err != nil || string(b) != content {
				t.Errorf("the victim's file after the helper ran: %q, %v; want it unchanged", b, err)
				os.WriteFile(precious, []byte(content), 0o600)
			}
		})
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	r, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, r); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// mountOptionsOf returns the options /proc/mounts shows for the mount on
// path (the topmost one).
func mountOptionsOf(path string) []string {
	b, _ := os.ReadFile("/proc/mounts")
	var opts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[1] == path {
			opts = strings.Split(f[3], ",")
		}
	}
	return opts
}

// TestFstabMountFlags: the fstab options ro, noexec, nosuid and nodev
// become flags of the FUSE mount, shown in /proc/mounts and enforced by
// the kernel: a write fails with EROFS, an exec with EACCES. Limits are
// given as limit=GROUP KEY=VALUE (the space written \040 in fstab) or
// limit=GROUP:KEY=VALUE:...; suid and dev, which a sluice mount never
// honours, are refused, as is unmount_dead, which mounts nothing.
func TestFstabMountFlags(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	os.WriteFile(filepath.Join(src, "hello"), []byte("hello"), 0o644)
	copyFile(t, "/bin/true", filepath.Join(src, "true"), 0o755)
	cfg := filepath.Join(dir, "data.toml")
	os.WriteFile(cfg, []byte("[[group]]\nname = \"t\"\nmatch = [\"uid=4242\"]\n"), 0o644)

	for _, o := range []string{"suid", "dev", "unmount_dead"} {
		if out, err := fstabHelper(src, mnt, "-o", "config="+cfg+","+o).CombinedOutput(); err == nil || !strings.Contains(string(out), "-o "+o+":") {
			t.Errorf("-o %s: %v, want it refused\n%s", o, err, out)
		}
	}
	if isMounted(mnt) {
		t.Fatal("mounted by a refused option")
	}

	out, err := fstabHelper(src, mnt, "-o", "config="+cfg+",ro,noexec,nosuid,nodev,nofail,limit=default rbps=1MiB,limit=t:wbps=3MiB:riops=50").CombinedOutput()
	if err != nil {
		t.Fatalf("mount.fuse.sluice: %v\n%s", err, out)
	}
	got := " " + strings.Join(mountOptionsOf(mnt), " ") + " "
	for _, want := range []string{"ro", "noexec", "nosuid", "nodev"} {
		if !strings.Contains(got, " "+want+" ") {
			t.Errorf("/proc/mounts shows %q for the mount, without %s", got, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "hello" {
		t.Errorf("read through a read-only mount: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "new"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create on a read-only mount: %v, want EROFS", err)
	}
	if f, err := os.OpenFile(filepath.Join(mnt, "hello"), os.O_WRONLY, 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("open for writing on a read-only mount: %v, want EROFS", err)
		if f != nil {
			f.Close()
		}
	}
	if err := exec.Command(filepath.Join(mnt, "true")).Run(); !errors.Is(err, syscall.EACCES) {
		t.Errorf("exec on a noexec mount: %v, want EACCES", err)
	}
	out, _ = sluice("stat", mnt).Output()
	for _, want := range []string{"rbps=1MiB", "wbps=3MiB", "riops=50"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("limit %s given in the options is not in force:\n%s", want, out)
		}
	}
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Errorf("umount: %v", err)
	}
}
