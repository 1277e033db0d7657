package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"sluice/control"
	"sluice/fsys"
)

// A config file or an fstab line may not ask for a takeover: every start
// of its mount would take over, or fail where nothing serves.
func init() {
	configFlags["takeover"] = "taking a mount over belongs on the command line of one upgrade"
	refusedOptions["takeover"] = "--takeover belongs on the command line of one upgrade, not on the mount's line"
}

// handoverState is what a mount's process hands to the one that takes it
// over (sluice mount --takeover): its command line, where it serves, and
// the file system's state.
type handoverState struct {
	Args       []string            `json:"args"`
	Source     string              `json:"source"`
	Mountpoint string              `json:"mountpoint"`
	Pid        int                 `json:"pid"`
	FS         *fsys.HandoverState `json:"fs"`
}

// taking is a takeover under way in the taking process.
type taking struct {
	c     *control.Taking
	st    handoverState
	pid   int
	files int
	dirs  int
}

// startTakeover asks the sluice serving the mount at the last of pos to
// hand it over. With MOUNTPOINT alone, the mount's own command line
// replaces *fs, *o, *pos and *args; otherwise they are this command's,
// less --takeover.
func startTakeover(pos []string, fs **pflag.FlagSet, o **mountOpts, outPos *[]string, args *[]string) (*taking, error) {
	if len(pos) < 1 || len(pos) > 2 {
		return nil, usagef("--takeover takes MOUNTPOINT, the mount to take over (and SOURCE before it to give new flags), got %d arguments", len(pos))
	}
	mp := pos[len(pos)-1]
	c, err := control.Takeover(mp)
	if err != nil {
		return nil, fmt.Errorf("--takeover %s: %v", mp, err)
	}
	tk := &taking{c: c}
	if err := json.Unmarshal(c.State, &tk.st); err != nil || tk.st.FS == nil {
		tk.abort(fmt.Errorf("the state handed over does not parse: %v", err))
		return nil, fmt.Errorf("--takeover %s: the state handed over does not parse (a sluice of another version?): %v", mp, err)
	}
	tk.pid, tk.files, tk.dirs = tk.st.Pid, len(tk.st.FS.Files), len(tk.st.FS.Dirs)
	if len(pos) == 1 {
		nfs, no := mountFlags()
		npos, err := parse(nfs, tk.st.Args)
		if err != nil {
			tk.abort(err)
			return nil, fmt.Errorf("--takeover %s: the mount's command line %q: %v", mp, strings.Join(tk.st.Args, " "), err)
		}
		*fs, *o, *outPos, *args = nfs, no, npos, tk.st.Args
		return tk, nil
	}
	*args = slices.DeleteFunc(slices.Clone(*args), func(a string) bool { return a == "--takeover" || a == "--takeover=true" })
	return tk, nil
}

// abort tells the old sluice the mount is not taken, and why: it serves
// on. Nil-safe, for a mount that is no takeover.
func (tk *taking) abort(err error) {
	if tk == nil {
		return
	}
	for _, fd := range tk.c.Fds {
		unix.Close(fd)
	}
	tk.c.Abort(err.Error())
}

// take makes the mount of opts from the state handed over, tells the old
// sluice it is taken, and serves it.
func (tk *taking) take(opts fsys.Options) (*fsys.FS, error) {
	same := func(a, b string) bool {
		a, _ = filepath.Abs(a)
		b, _ = filepath.Abs(b)
		return filepath.Clean(a) == filepath.Clean(b)
	}
	if !same(opts.Source, tk.st.Source) || !same(opts.Mountpoint, tk.st.Mountpoint) {
		err := fmt.Errorf("--takeover: the mount serves %s on %s, not %s on %s", tk.st.Source, tk.st.Mountpoint, opts.Source, opts.Mountpoint)
		tk.abort(err)
		return nil, usageError{err}
	}
	m, err := fsys.Adopt(opts, tk.st.FS, tk.c.Fds)
	if err != nil {
		tk.c.Abort(err.Error())
		return nil, fmt.Errorf("--takeover %s: %v (the old sluice serves on)", opts.Mountpoint, err)
	}
	if err := tk.c.Taken(); err != nil {
		m.Discard()
		return nil, fmt.Errorf("--takeover %s: %v", opts.Mountpoint, err)
	}
	m.Serve()
	return m, nil
}

// Handover hands the mount over to a sluice taking it (control.Handoverer).
func (t *target) Handover() (*control.Handing, error) {
	st, fds, err := t.m.Handover(fsys.HandoverWait)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	b, err := json.Marshal(handoverState{Args: t.args, Source: t.opts.Source, Mountpoint: t.opts.Mountpoint, Pid: os.Getpid(), FS: st})
	log := t.opts.Logger
	t.mu.Unlock()
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		t.m.Resume()
		return nil, err
	}
	if log != nil {
		log.Info("handing over", "mountpoint", t.opts.Mountpoint, "open_files", len(st.Files), "open_dirs", len(st.Dirs))
	}
	return &control.Handing{State: b, Fds: fds,
		Commit: func() {
			t.handed.Store(true)
			t.closeListeners()
		},
		Done: func() {
			if log != nil {
				log.Info("handed over: another sluice serves the mount now", "mountpoint", t.opts.Mountpoint)
			}
			t.m.Release()
		},
		Abort: func(reason string) {
			if log != nil {
				log.Warn("handover not taken; serving on", "reason", reason)
			}
			t.m.Resume()
		},
	}, nil
}

var _ control.Handoverer = (*target)(nil)
