package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

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
	Cwd        string              `json:"cwd"` // where Args's relative paths start
	FS         *fsys.HandoverState `json:"fs"`
}

// taking is a takeover under way in the taking process.
type taking struct {
	c     *control.Taking
	st    handoverState
	pid   int
	files int
	dirs  int
	// own says the command line is this command's, not the mount's.
	own bool
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
		// The mount's own command line, its relative paths (a --config)
		// from where it started.
		if tk.st.Cwd != "" {
			if err := os.Chdir(tk.st.Cwd); err != nil {
				tk.abort(err)
				return nil, fmt.Errorf("--takeover %s: the mount's working directory: %v", mp, err)
			}
		}
		nfs, no := mountFlags()
		npos, err := parse(nfs, tk.st.Args)
		if err != nil {
			tk.abort(err)
			return nil, fmt.Errorf("--takeover %s: the mount's command line %q: %v", mp, strings.Join(tk.st.Args, " "), err)
		}
		*fs, *o, *outPos, *args = nfs, no, npos, tk.st.Args
		return tk, nil
	}
	tk.own = true
	*args = slices.DeleteFunc(slices.Clone(*args), func(a string) bool { return a == "--takeover" || strings.HasPrefix(a, "--takeover=") })
	return tk, nil
}

// onlyTakeover refuses flags beside --takeover MOUNTPOINT alone, which
// runs with the mount's own command line: given flags would be dropped.
func onlyTakeover(fs *pflag.FlagSet, pos []string) error {
	if len(pos) != 1 {
		return nil
	}
	var others []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed && f.Name != "takeover" {
			others = append(others, "--"+f.Name)
		}
	})
	if len(others) > 0 {
		return usagef("--takeover %s runs with the mount's own command line, so %s would be dropped: give SOURCE MOUNTPOINT too to run with other flags", pos[0], strings.Join(others, ", "))
	}
	return nil
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
	m, err := fsys.Adopt(opts, tk.st.FS, tk.c.Fds, tk.own)
	if err != nil {
		tk.c.Abort(err.Error())
		return nil, fmt.Errorf("--takeover %s: %v (the old sluice serves on)", opts.Mountpoint, err)
	}
	if err := tk.c.Taken(); err != nil && !(errors.Is(err, control.ErrUnconfirmed) && tk.oldStopped(opts.Mountpoint)) {
		m.Discard()
		return nil, fmt.Errorf("--takeover %s: %v (the old sluice serves on)", opts.Mountpoint, err)
	}
	m.Serve()
	return m, nil
}

// oldStopped decides a takeover whose verdict went out unconfirmed: the
// old sluice took it if it exits, and did not if it serves again (its
// control socket answers). Within a minute; else it is taken as serving,
// and this process serves nothing.
func (tk *taking) oldStopped(mountpoint string) bool {
	for range 600 {
		if err := unix.Kill(tk.pid, 0); errors.Is(err, unix.ESRCH) {
			return true
		}
		if _, err := control.Stat(mountpoint); err == nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// Handover hands the mount over to a sluice taking it (control.Handoverer).
func (t *target) Handover(taker int) (*control.Handing, error) {
	// No change of groups, limits or tags from here on: the state sent
	// would not hold it.
	t.changes.Lock()
	t.handing.Store(true)
	t.changes.Unlock()
	fail := func(err error) (*control.Handing, error) {
		t.handing.Store(false)
		return nil, err
	}
	st, fds, err := t.m.Handover(fsys.HandoverWait)
	if err != nil {
		return fail(err)
	}
	cwd, _ := os.Getwd()
	t.mu.Lock()
	b, err := json.Marshal(handoverState{Args: t.args, Source: t.opts.Source, Mountpoint: t.opts.Mountpoint, Pid: os.Getpid(), Cwd: cwd, FS: st})
	log := t.opts.Logger
	t.mu.Unlock()
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		t.m.Resume()
		return fail(err)
	}
	if log != nil {
		log.Info("handing over", "mountpoint", t.opts.Mountpoint, "open_files", len(st.Files), "open_dirs", len(st.Dirs))
	}
	return &control.Handing{State: b, Fds: fds,
		Commit: func() {
			t.handed.Store(true)
			t.closeListeners()
			// A service's main process is the taker from now on
			// (NotifyAccess=main: only this process may say so).
			if taker > 0 && log != nil {
				notify(log, fmt.Sprintf("MAINPID=%d", taker))
			}
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
			t.handing.Store(false)
		},
	}, nil
}

var _ control.Handoverer = (*target)(nil)

// upgrade starts the sluice binary on disk (a new version installed over
// this one's) to take the mount over, on SIGUSR2: in the service's
// cgroup, and told by this process to the service manager as its main
// process once it has taken the mount. What it logs goes where this
// process logs.
func (t *target) upgrade(log *slog.Logger) {
	exe, err := os.Executable()
	if err != nil {
		log.Warn("upgrade: the binary to run", "err", err)
		return
	}
	t.mu.Lock()
	mnt := t.opts.Mountpoint
	t.mu.Unlock()
	cmd := exec.Command(exe, "mount", "--takeover", mnt)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// Not in this process's group: a Ctrl-C meant for a foreground mount
	// that has handed over does not reach the one serving.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Warn("upgrade: starting the new sluice", "binary", exe, "err", err)
		return
	}
	log.Info("upgrade: a new sluice takes the mount over", "binary", exe, "pid", cmd.Process.Pid)
	go func() {
		if err := cmd.Wait(); err != nil && !t.handed.Load() {
			log.Warn("upgrade: the new sluice did not take the mount over; serving on", "pid", cmd.Process.Pid, "err", err)
		}
	}()
}
