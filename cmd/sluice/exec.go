package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sluice/control"
	"sluice/group"
)

const execHelp = `Usage: sluice exec --mount MOUNTPOINT --group NAME -- CMD [ARGS...]

Runs CMD so that its reads and writes through MOUNTPOINT, and those of every
process it starts, are charged to group NAME, ahead of any --group rule, with
nothing to set up. The command runs in a cgroup of its own in sluice's
cgroup v1 hierarchy (name=sluice, mounted on /run/sluice/cgroup if it is not
mounted), which its processes keep through setsid and daemonizing: the
assignment ends when the last of them exits. Where that hierarchy cannot be
had, a warning says why, and the assignment follows the parent chain: a
process that leaves the command's process tree leaves the group. The
group's limits are set as for any group (mount --limit, sluice set). Only
the user who mounted (normally root) may do it.
  sluice exec --mount /mnt/data --group batch -- rsync -a /mnt/data/src/ /backup/
`

// execFlags returns exec's flags: --mount and --group.
func execFlags() (*pflag.FlagSet, *string, *string) {
	fs := newFlagSet("exec")
	mount := fs.String("mount", "", "the mount point whose throttle charges the command (required)")
	name := fs.String("group", "", "the group the command's I/O through that mount is charged to (required)")
	flagDoc(fs, "", map[string]string{"mount": "MOUNTPOINT", "group": "NAME"})
	return fs, mount, name
}

// execCommand is sluice exec. Its flags end at the command: what follows
// is the command's own.
func execCommand(stderr io.Writer) *cobra.Command {
	fs, mount, name := execFlags()
	c := command("exec --mount MOUNTPOINT --group NAME -- CMD [ARGS...]", "run CMD with its I/O through a mount charged to a group", execHelp, fs, func(cmd []string) error {
		return cmdExec(*mount, *name, cmd, stderr)
	})
	c.Flags().SetInterspersed(false)
	c.RegisterFlagCompletionFunc("mount", completeMount)
	c.RegisterFlagCompletionFunc("group", cobra.NoFileCompletions)
	return c
}

// cmdExec becomes cmd, charged to group name of mount.
func cmdExec(mount, name string, cmd []string, stderr io.Writer) error {
	switch {
	case mount == "":
		return usagef("--mount is required: the mount point whose throttle charges the command")
	case name == "":
		return usagef("--group is required: the group the command is charged to")
	case len(cmd) == 0:
		return usagef("want a command after the flags (sluice exec --mount M --group G -- CMD ARGS...)")
	}
	if err := group.ValidName(name); err != nil {
		return usagef("--group %s: %v", name, err)
	}
	path, err := exec.LookPath(cmd[0])
	if err != nil {
		return notRun(cmd[0], err)
	}
	// Enter a cgroup of this process's own, tag this process (the mount
	// tags the cgroup it finds it in), then become the command: it keeps
	// the process id, start time and cgroup the tag holds.
	pid := int32(os.Getpid())
	_, start, err := group.ReadStat(pid)
	if err == nil {
		_, err = group.EnterCgroup(pid, start)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice exec: warning: the command gets no cgroup of its own (%v): a process it starts that leaves its process tree (setsid, a daemon re-parented to init) is not charged to %s\n", err, name)
	}
	if err := control.Tag(mount, pid, name); err != nil {
		return err
	}
	return notRun(cmd[0], syscall.Exec(path, cmd, os.Environ()))
}

// notRun is the error of a command that could not be run, with the shell's
// exit status: 127 for one not found, 126 for one found but not run.
func notRun(name string, err error) error {
	var pe *fs.PathError
	var ee *exec.Error
	switch {
	case errors.As(err, &ee) && errors.Is(ee.Err, exec.ErrNotFound):
		return exitError{fmt.Errorf("%s: command not found", name), 127}
	case errors.As(err, &pe):
		err = pe.Err
	case errors.As(err, &ee):
		err = ee.Err
	}
	code := 126
	if errors.Is(err, syscall.ENOENT) {
		code = 127
	}
	return exitError{fmt.Errorf("%s: %v", name, err), code}
}
