// Package mountinfo reads the mount table of /proc/self/mountinfo.
package mountinfo

import (
	"os"
	"strconv"
	"strings"
)

// Mount is one line of the table.
type Mount struct {
	Root   string   // the mounted tree's root within its file system
	Point  string   // where it is mounted
	FSType string   // "ext4", "fuse.sluice", "cgroup"
	Super  []string // the super block's options: "user_id=0", "name=sluice"
}

// Parse reads the lines of a mountinfo text, skipping those it cannot:
// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER.
func Parse(text string) []Mount {
	var out []Mount
	for line := range strings.Lines(text) {
		pre, post, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 {
			continue
		}
		m := Mount{Root: Unescape(f[3]), Point: Unescape(f[4]), FSType: g[0]}
		if len(g) >= 3 {
			m.Super = strings.Split(g[2], ",")
		}
		out = append(out, m)
	}
	return out
}

// Read returns this process's mount table.
func Read() ([]Mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return Parse(string(b)), nil
}

// At returns the last mount on dir, the one a lookup of dir reaches, and
// whether there is one.
func At(dir string) (m Mount, ok bool, err error) {
	all, err := Read()
	for _, x := range all {
		if x.Point == dir {
			m, ok = x, true
		}
	}
	return m, ok, err
}

// Unescape undoes the octal escapes of a path in a mount table, of
// /proc/self/mountinfo or /proc/self/mounts (\040 for a space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
