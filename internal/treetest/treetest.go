// Package treetest compares directory trees in tests.
package treetest

import (
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Same fails t where directory b differs from a: names, types, modes,
// owners, sizes, contents, link targets, link counts, extended attributes
// (top-level names starting with ignore aside). Times are not compared: each mirror's file
// system stamps the writes it is given itself.
func Same(t testing.TB, a, b, ignore string) {
	t.Helper()
	describe := func(root string) map[string]string {
		out := map[string]string{}
		filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				t.Errorf("walk %s: %v", p, err)
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			if ignore != "" && strings.HasPrefix(rel, ignore) {
				return nil
			}
			st := fi.Sys().(*syscall.Stat_t)
			d := fmt.Sprintf("%v uid=%d gid=%d nlink=%d", fi.Mode(), st.Uid, st.Gid, st.Nlink)
			switch {
			case fi.Mode().IsRegular():
				b, _ := os.ReadFile(p)
				d += fmt.Sprintf(" size=%d sum=%x", len(b), crc32.ChecksumIEEE(b))
			case fi.Mode()&os.ModeSymlink != 0:
				l, _ := os.Readlink(p)
				d += " -> " + l
			}
			if fi.Mode()&os.ModeSymlink == 0 {
				buf := make([]byte, 4096)
				n, _ := unix.Listxattr(p, buf)
				for _, x := range strings.Split(string(buf[:max(n, 0)]), "\x00") {
					if x != "" {
						v := make([]byte, 4096)
						m, _ := unix.Getxattr(p, x, v)
						d += fmt.Sprintf(" %s=%q", x, v[:max(m, 0)])
					}
				}
			}
			out[rel] = d
			return nil
		})
		return out
	}
	da, db := describe(a), describe(b)
	for k, v := range da {
		if db[k] != v {
			t.Errorf("%s: %s in %s, %q in %s", k, v, a, db[k], b)
		}
	}
	for k, v := range db {
		if _, ok := da[k]; !ok {
			t.Errorf("%s: only in %s (%s)", k, b, v)
		}
	}
}
