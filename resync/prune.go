package resync

import (
	"os"

	"golang.org/x/sys/unix"
)

// Prune removes from the tree under directory dst what the tree under
// directory src lacks or holds as another type, before anything is
// copied to it: what that frees makes room for the copies, whichever
// directories they go to. A source directory gone or replaced meanwhile
// is left to the copy.
func (c *Copier) Prune(src, dst int) error {
	return c.pruneDir(src, dst, "")
}

func (c *Copier) pruneDir(sfd, dfd int, rel string) error {
	if err := c.step(rel + "/"); err != nil {
		return err
	}
	stypes, err := Types(sfd)
	if err != nil {
		return err
	}
	dtypes, err := Types(dfd)
	if err != nil {
		return err
	}
	for name, dt := range dtypes {
		if rel == "" && c.skip(name) {
			continue
		}
		if err := c.step(rel + "/" + name); err != nil {
			return err
		}
		st, ok := stypes[name]
		if !ok || st != dt {
			if err := removeAll(dfd, name); err != nil {
				return err
			}
			continue
		}
		if dt != os.ModeDir {
			continue
		}
		// The source changes meanwhile: a source directory gone or
		// replaced since is left to the copy.
		sd, err := unix.Openat(sfd, name, dirFlags, 0)
		if noDir(err) {
			continue
		}
		if err != nil {
			return err
		}
		d, err := unix.Openat(dfd, name, dirFlags, 0)
		if err == nil {
			err = c.pruneDir(sd, d, rel+"/"+name)
			unix.Close(d)
		}
		unix.Close(sd)
		if err != nil {
			return err
		}
	}
	return nil
}

// Types lists directory fd's entries with their types (os.ModeDir,
// os.ModeSymlink, ...; 0 for a regular file).
func Types(fd int) (map[string]os.FileMode, error) {
	nfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "dir")
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make(map[string]os.FileMode, len(des))
	for _, de := range des {
		out[de.Name()] = de.Type()
	}
	return out, nil
}
