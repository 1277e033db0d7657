package fsys

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"sluice/group"
	"sluice/stack"
)

// fioEngines are the kinds of handle fio writes and reads through.
var fioEngines = map[string][]string{
	"buffered": {"--ioengine=psync", "--direct=0"},
	"direct":   {"--ioengine=psync", "--direct=1"},
	"mmap":     {"--ioengine=mmap"},
}

// TestFioVerify: fio writes files with crc32c checksums in every block
// (random offsets, 4 KiB to 256 KiB blocks) through buffered, O_DIRECT and
// mmap handles and reads them back through handles of the same kind and
// of another, as a member of a limited group and as an unlimited user;
// fio fails on the first mismatch. Every file is then verified again
// through a new mount of the same source, after the first was unmounted.
// All of it runs without and with the write cache.
func TestFioVerify(t *testing.T) {
	needFUSE(t)
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("skipping: fio is not installed")
	}
	for _, wc := range []bool{false, true} {
		t.Run(fmt.Sprintf("write-cache=%v", wc), func(t *testing.T) { fioVerify(t, wc) })
	}
}

func fioVerify(t *testing.T, writeCache bool) {
	_, src, mnt := mountDirs(t)
	os.Chmod(src, 0o777)
	opts := Options{Source: src, Mountpoint: mnt, AllowOther: true, WriteCache: writeCache,
		Rules:  []group.Rule{{Group: "lim", UID: new(uint32(1001))}},
		Limits: []group.LimitSpec{limit(t, "lim rbps=128MiB wbps=128MiB")}}
	opts.Options.Options = stack.DefaultOptions()
	_, unmount := serve(t, opts)
	t.Cleanup(unmount)

	type fioCase struct {
		name     string
		uid      uint32
		write    string
		read     string
		verified bool
	}
	var cases []*fioCase
	for _, who := range []struct {
		name string
		uid  uint32
	}{{"limited", 1001}, {"unlimited", 1003}} {
		for _, wr := range [][2]string{
			{"buffered", "buffered"}, {"direct", "direct"}, {"mmap", "mmap"},
			{"buffered", "mmap"}, {"mmap", "direct"}, {"direct", "buffered"},
		} {
			cases = append(cases, &fioCase{name: fmt.Sprintf("%s-%s-then-%s", who.name, wr[0], wr[1]),
				uid: who.uid, write: wr[0], read: wr[1]})
		}
	}
	// fio runs in a directory of its own; it may leave state files there.
	work := t.TempDir()
	os.Chmod(work, 0o777)
	fio := func(c *fioCase, dir, engine string, phase ...string) error {
		args := append([]string{"--name=" + c.name, "--filename=" + filepath.Join(dir, c.name),
			"--size=4M", "--bsrange=4k-256k", "--rw=randwrite", "--verify=crc32c", "--verify_fatal=1",
			"--verify_state_save=0", "--output-format=terse"}, fioEngines[engine]...)
		cmd := exec.Command("fio", append(args, phase...)...)
		cmd.Dir = work
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.uid}}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("fio %v: %v\n%s", cmd.Args[1:], err, out)
		}
		return nil
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := fio(c, mnt, c.write, "--do_verify=0", "--fsync_on_close=1"); err != nil {
				t.Fatalf("write: %v", err)
			}
			if err := fio(c, mnt, c.read, "--verify_only"); err != nil {
				t.Fatalf("verify: %v", err)
			}
			c.verified = true
		})
	}

	unmount()
	mnt2 := filepath.Join(filepath.Dir(mnt), "mnt2")
	if err := os.Mkdir(mnt2, 0o755); err != nil {
		t.Fatal(err)
	}
	opts.Mountpoint = mnt2
	_, unmount2 := serve(t, opts)
	t.Cleanup(unmount2)
	for _, c := range cases {
		if !c.verified {
			continue
		}
		if err := fio(c, mnt2, c.read, "--verify_only"); err != nil {
			t.Errorf("%s, verified again after unmount and remount: %v", c.name, err)
		}
	}
}
