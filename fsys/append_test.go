package fsys

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/group"
)

// writerCases are the mounts a tenant's writes are checked on: a group
// without a limit (its writes go straight to the backing file) and a
// limited one (through the engine, with direct I/O).
var writerCases = []struct {
	name   string
	limits []string
}{
	{"unlimited", nil},
	{"limited", []string{"default wbps=1GiB rbps=1GiB"}},
}

// limitSpecs parses limit specs.
func limitSpecs(t *testing.T, specs []string) []group.LimitSpec {
	var out []group.LimitSpec
	for _, s := range specs {
		out = append(out, limit(t, s))
	}
	return out
}

func appendMount(t *testing.T, limits []string) (src, mnt string) {
	src, mnt, _ = mount(t, Options{Limits: limitSpecs(t, limits)})
	if err := os.Chown(src, 4101, 4101); err != nil {
		t.Fatal(err)
	}
	return src, mnt
}

// appendAs appends s to path as uid 4101, through a new open with
// O_APPEND, or through f when it is not nil.
func appendAs(t *testing.T, path string, f *os.File, s string) error {
	t.Helper()
	var err error
	if e := runAsGroups(4101, 4101, nil, func() {
		if f == nil {
			var g *os.File
			if g, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
				return
			}
			defer g.Close()
			f = g
		}
		_, err = f.WriteString(s)
	}); e != nil {
		t.Fatal(e)
	}
	return err
}

// TestAppend: an O_APPEND write lands at the end of the file as SOURCE
// has it, whoever wrote last, through a new open and through one kept
// open while SOURCE grew behind the mount.
func TestAppend(t *testing.T) {
	for _, c := range writerCases {
		t.Run(c.name, func(t *testing.T) {
			src, mnt := appendMount(t, c.limits)
			for _, kept := range []bool{false, true} {
				name := "new-opens"
				if kept {
					name = "kept-open"
				}
				var f *os.File
				if kept {
					if err := runAsGroups(4101, 4101, nil, func() {
						f, _ = os.OpenFile(filepath.Join(mnt, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
					}); err != nil || f == nil {
						t.Fatalf("open %s as uid 4101: %v", name, err)
					}
				}
				if err := appendAs(t, filepath.Join(mnt, name), f, "AAAA"); err != nil {
					t.Fatal(err)
				}
				s, err := os.OpenFile(filepath.Join(src, name), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.WriteString("BBBB"); err != nil {
					t.Fatal(err)
				}
				s.Close()
				if err := appendAs(t, filepath.Join(mnt, name), f, "CCCC"); err != nil {
					t.Fatal(err)
				}
				if f != nil {
					f.Close()
				}
				for _, dir := range []string{src, mnt} {
					b, err := os.ReadFile(filepath.Join(dir, name))
					if err != nil {
						t.Fatal(err)
					}
					if string(b) != "AAAABBBBCCCC" {
						t.Errorf("%s: %s holds %q after appends through the mount, on SOURCE, through the mount; want %q",
							name, dir, b, "AAAABBBBCCCC")
					}
				}
			}
		})
	}
}

// TestAppendOnly: a file with the append-only attribute takes appends
// through the mount as on SOURCE, and refuses other writes as SOURCE does.
func TestAppendOnly(t *testing.T) {
	for _, c := range writerCases {
		t.Run(c.name, func(t *testing.T) {
			src, mnt := appendMount(t, c.limits)
			p := filepath.Join(src, "log")
			if err := os.WriteFile(p, []byte("one\n"), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := setAppendOnly(p, true); err != nil {
				t.Skipf("SOURCE's file system takes no append-only attribute: %v", err)
			}
			t.Cleanup(func() { setAppendOnly(p, false) })
			for _, dir := range []string{src, mnt} {
				if err := appendAs(t, filepath.Join(dir, "log"), nil, "more\n"); err != nil {
					t.Errorf("appending to an append-only file in %s as uid 4101: %v", dir, err)
				}
				var err error
				if e := runAsGroups(4101, 4101, nil, func() {
					var f *os.File
					if f, err = os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY, 0); err == nil {
						f.Close()
					}
				}); e != nil {
					t.Fatal(e)
				}
				if !errors.Is(err, syscall.EPERM) {
					t.Errorf("opening an append-only file in %s for writing without O_APPEND: %v, want EPERM", dir, err)
				}
			}
			b, err := os.ReadFile(filepath.Join(mnt, "log"))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != "one\nmore\nmore\n" {
				t.Errorf("the append-only file reads %q, want %q", b, "one\nmore\nmore\n")
			}
		})
	}
}

// fsAppendFL is FS_APPEND_FL of linux/fs.h.
const fsAppendFL = 0x20

// setAppendOnly sets or clears the append-only attribute of path.
func setAppendOnly(path string, on bool) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	if on {
		flags |= fsAppendFL
	} else {
		flags &^= fsAppendFL
	}
	v := int(flags)
	return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, v)
}
