package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzConfig: whatever a config file holds, the mount command's parsing
// of it returns options or an error, and never panics.
func FuzzConfig(f *testing.F) {
	for _, s := range []string{
		"source = \"/srv\"\nmountpoint = \"/mnt\"\n",
		"mountpoint = \"/mnt\"\nmirrors = [\"/a\", \"/b\"]\nread-policy = \"pid\"\n",
		"source = \"/srv\"\nmountpoint = \"/mnt\"\nmax-io = \"128KiB\"\n[[group]]\nname = \"ci\"\nmatch = [\"uid=1001\"]\nlimits = \"rbps=10MiB\"\n",
		"[[group]]\nname = 1\n", "max-wait = \"-1s\"\n", "= =\n", "limit = [\"default rbps=1\"]\n", "[group]\nname=\"x\"",
	} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, src string) {
		p := filepath.Join(dir, "sluice.toml")
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		commandOptions([]string{"--config", p}, io.Discard)
	})
}

// FuzzFstab: whatever options an fstab line gives the mount helper, it
// turns them into mount arguments or an error, and those arguments parse
// as a mount command line or fail with an error; nothing panics.
func FuzzFstab(f *testing.F) {
	for _, s := range []string{"rw,noauto,limit=default rbps=10MiB", "allow_other,max_io=128KiB,x-systemd.automount", "mirror=/a,mirror=/b,read_policy=pid",
		"nofail,_netdev,cache_mode=kernel", "unknown=1", "max_io", "limit", ",,,", "comment=x,write_cache"} {
		f.Add("/srv/data", "/mnt/data", s)
	}
	f.Fuzz(func(t *testing.T, source, mnt, opts string) {
		args, _, err := fstabArgs([]string{source, mnt, "-o", opts})
		if err != nil {
			return
		}
		commandOptions(args, io.Discard)
	})
}
