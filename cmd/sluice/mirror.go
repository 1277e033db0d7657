package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sluice/backing"
	"sluice/control"
	"sluice/stack"
)

const mirrorAddHelp = `Usage: sluice mirror add [--rate SIZE] [--no-resync] MOUNTPOINT DIR

Adds directory DIR to the mirror set served on MOUNTPOINT while it serves.
DIR joins the set stale: every healthy mirror records it so (a restart
keeps it stale) and it gets a .sluice-mirror state file with an id of its
own. Then a resync copies a healthy mirror onto it while the mount serves,
printing its progress every second, and once equal DIR is read and written
as the other mirrors are; the command returns then.

DIR may be empty; a copy of a mirror (cp -a, rsync -a, recognised by the
state file it carries, which is replaced); or seeded with a copy of a
mirror that left the state files out (rsync -aHAX
--exclude='/.sluice-mirror*' MIRROR/ DIR/): the resync copies only what
differs. A DIR holding names the set does not is refused (the resync
would remove them), as is one inside a mirror or the mount. One resync or
add runs at a time.

The mount's command line is not changed: give it --mirror DIR too (or its
config file or fstab entry), so that the next mount serves DIR as well.
  sluice mirror add /mnt/data /disks/c/data
  sluice mirror add --rate 50MiB /mnt/data /disks/c/data
`

// mirrorFlags returns the flags of mirror add: --rate and --no-resync.
func mirrorFlags() (fs *pflag.FlagSet, rate *sizeFlag, noResync *bool) {
	fs = newFlagSet("mirror add")
	r := sizeFlag(0)
	fs.Var(&r, "rate", "copy at most this many bytes a second (0: as fast as the disks go)")
	noResync = fs.Bool("no-resync", false, "return once DIR has joined the set, stale; sluice resync MOUNTPOINT makes it equal later")
	return fs, &r, noResync
}

// mirrorCommand is sluice mirror and its subcommands; its help is theirs.
func mirrorCommand(stdout io.Writer) *cobra.Command {
	c := command("mirror add MOUNTPOINT DIR", "change a running mirror set: add a mirror", "", nil, nil)
	c.RunE = func(c *cobra.Command, pos []string) error {
		var subs []string
		for _, sub := range c.Commands() {
			subs = append(subs, sub.Name())
		}
		if len(pos) == 0 {
			return usagef("want a subcommand: %s", strings.Join(subs, ", "))
		}
		return usagef("unknown subcommand %q: want one of %s", pos[0], strings.Join(subs, ", "))
	}
	fs, rate, noResync := mirrorFlags()
	add := command("add [--rate SIZE] [--no-resync] MOUNTPOINT DIR", "add DIR to a mirror set while it serves", mirrorAddHelp, fs, func(pos []string) error {
		return cmdMirrorAdd(pos, *rate, *noResync, stdout)
	})
	add.ValidArgsFunction = func(c *cobra.Command, pos []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(pos) == 0 {
			return completeMount(c, pos, toComplete)
		}
		if len(pos) == 1 {
			return nil, cobra.ShellCompDirectiveFilterDirs
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c.AddCommand(add)
	return c
}

// cmdMirrorAdd adds directory pos[1] to the mirror set served on pos[0],
// then, unless noResync, resyncs it at rate bytes a second at most (0: no
// bound) until it serves.
func cmdMirrorAdd(pos []string, rate sizeFlag, noResync bool, stdout io.Writer) error {
	if len(pos) != 2 {
		return usagef("add wants MOUNTPOINT and DIR, got %d argument(s)", len(pos))
	}
	if rate < 0 {
		return usagef("--rate %d: want a size of 0 or more", rate)
	}
	mnt := pos[0]
	dir, err := filepath.Abs(pos[1])
	if err != nil {
		return err
	}
	note, err := control.MirrorAdd(mnt, dir)
	if err != nil {
		return err
	}
	if note != "" {
		fmt.Fprintln(stdout, note)
	}
	keep := fmt.Sprintf("The mount's command line is as it was: add --mirror %s to it (or to its config file or fstab entry) to keep the mirror when the mount starts again.\n", dir)
	if noResync {
		fmt.Fprintf(stdout, "%s is stale until sluice resync %s makes it equal.\n%s", dir, mnt, keep)
		return nil
	}
	if err := control.Resync(mnt, int64(rate)); err != nil {
		return fmt.Errorf("%v; %s stays stale: run sluice resync %s", err, dir, mnt)
	}
	fmt.Fprintf(stdout, "resync started\n")
	if err := waitJoined(mnt, dir, stdout); err != nil {
		return err
	}
	fmt.Fprint(stdout, keep)
	return nil
}

// waitJoined waits for the resync started on mnt to end, printing its
// progress every second, and checks that mirror dir came out healthy.
func waitJoined(mnt, dir string, stdout io.Writer) error {
	start, printed := time.Now(), time.Now()
	for {
		time.Sleep(200 * time.Millisecond)
		st, err := control.Stat(mnt)
		if err != nil {
			return err
		}
		var running []backing.MirrorStats
		for _, m := range st.Mirrors {
			if m.State == backing.Resyncing {
				running = append(running, m)
			}
		}
		if len(running) > 0 {
			if time.Since(printed) >= time.Second {
				printed = time.Now()
				for _, m := range running {
					fmt.Fprintf(stdout, "%s: %s copied in %s\n", m.Dir, stack.HumanBytes(m.Resynced), time.Since(start).Round(time.Second))
				}
			}
			continue
		}
		if st.LastResync != "ok" {
			return fmt.Errorf("resync failed: %s; %s stays stale (the set serves from the others): mend the cause and run sluice resync %s", st.LastResync, dir, mnt)
		}
		for _, m := range st.Mirrors {
			if m.Dir != dir {
				continue
			}
			if m.State != backing.Healthy {
				return fmt.Errorf("%s is %s after the resync: run sluice resync %s", dir, m.State, mnt)
			}
			fmt.Fprintf(stdout, "%s: healthy, serving reads (%s copied in %s)\n", dir, stack.HumanBytes(m.Resynced), time.Since(start).Round(time.Second))
			return nil
		}
		return fmt.Errorf("%s is no longer in the set served on %s", dir, mnt)
	}
}

// MirrorAdd adds directory dir to the mount's mirror set (control.Target).
func (t *target) MirrorAdd(dir string) (string, error) {
	end, err := t.begin()
	if err != nil {
		return "", err
	}
	defer end()
	ms := t.m.Mirrors()
	if ms == nil {
		return "", errors.New("this mount serves SOURCE, not a mirror set: a mirror set is mounted with --mirror DIR twice or more")
	}
	t.mu.Lock()
	mnt := t.opts.Mountpoint
	t.mu.Unlock()
	notes, err := ms.AddMirror(dir, mnt)
	return strings.Join(notes, "\n"), err
}
