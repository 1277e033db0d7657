package main

import (
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
