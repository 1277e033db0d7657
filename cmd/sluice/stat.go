package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sluice/backing"
	"sluice/control"
	"sluice/group"
	"sluice/mirror"
)

const statHelp = `Usage: sluice stat [--bytes | --json] MOUNTPOINT

Prints per-group counters of a running mount, like io.stat, sizes in binary
units and counts rounded to three significant figures (--bytes: exact). Per
group, after its limits:
  applications  bytes and calls as seen at FUSE (JSON app_rbytes, app_reads,
                app_wbytes, app_writes)
  device        bytes and I/Os after splitting into --max-io pieces, what the
                limits govern (rbytes, rios, wbytes, wios)
  throttled     time reads waited for the throttle, summed over device I/Os
                (throttled_ns), and time writers were paused (wthrottled_ns)
  readahead     bytes read ahead, of them read by an application, and dropped
                unused (ra_issued, ra_used, ra_wasted)
  writeback     bytes of the kernel's writeback without a caller (mmap writes,
                written at once and charged as debt: wb_callerless), bytes
                whose backing writeback sluice started early (wb_early), bytes
                written and still dirty in the backing page cache now (dirty)
A group's counters include its descendants'. The first line says how
throttled reads open backing files (direct, buffered) and how many reads
went past SOURCE's page cache (O_DIRECT, none of the range being cached
there); the last, the bytes in sluice's cache and the I/Os queued. Only the
user who mounted (normally root) may ask.

--json prints schema 1: {"schema": 1, "source", "mountpoint", "backing",
"cold_reads", "time", "groups": [{"group", "limits", and every counter above
under its column name, times as *_ns}], "cache_bytes", "cache_limit",
"queued", and for a mirror set "read_policy", "mirrors": [{"dir", "state", "reads", "bytes",
"errors", "hedged", "inflight", "latency_ns", "read_ns" (the total time of its
reads), "resynced_bytes"}],
"last_resync", and for a mount made with --supervise "supervised": {"pid" (the
supervisor's), "crashes" (of the serving process, survived), "last_crash"}}.
Within a schema fields are only added; one removed, renamed
or changing meaning makes a new schema number.
  sluice stat /mnt/data
  sluice stat --json /mnt/data | jq '.groups[] | {group, rbytes}'
`

// statFlags returns stat's flags: --json and --bytes.
func statFlags() (fs *pflag.FlagSet, asJSON, exact *bool) {
	fs = newFlagSet("stat")
	asJSON = fs.Bool("json", false, "print JSON instead of text")
	exact = fs.Bool("bytes", false, "print exact figures: bytes and calls in full, not rounded to three significant figures")
	return fs, asJSON, exact
}

// statCommand is sluice stat.
func statCommand(stdout io.Writer) *cobra.Command {
	fs, asJSON, exact := statFlags()
	c := command("stat [--bytes | --json] MOUNTPOINT", "per-group counters of a running mount", statHelp, fs, func(pos []string) error {
		return cmdStat(pos, *asJSON, *exact, stdout)
	})
	c.ValidArgsFunction = completeMount
	return c
}

// cmdStat prints the counters of the mount pos names, as JSON or as text
// (exact: figures in full).
func cmdStat(pos []string, asJSON, exact bool, stdout io.Writer) error {
	if len(pos) != 1 {
		return usagef("want one MOUNTPOINT, got %d argument(s)", len(pos))
	}
	st, err := control.Stat(pos[0])
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	fmt.Fprint(stdout, st.Format(exact))
	return nil
}

const setHelp = `Usage: sluice set MOUNTPOINT 'GROUP KEY=VALUE...'
       sluice set MOUNTPOINT read-policy=NAME

Changes a group's limits on a running mount, at once and without a remount.
Keys not named keep their values; queued requests are re-timed to the new
limits, never left hanging. Same syntax as mount --limit:
  sluice set /mnt/data 'default rbps=1MiB'
  sluice set /mnt/data 'tenants/a riops=max wbps=20MiB'
A mirror set's read policy switches the same way (adaptive, pid, roundrobin
or latency; see sluice help mount):
  sluice set /mnt/data read-policy=pid
`

// setCommand is sluice set.
func setCommand(stderr io.Writer) *cobra.Command {
	c := command("set MOUNTPOINT 'GROUP KEY=VALUE...' | read-policy=NAME", "change a group's limits or the read policy live", setHelp, nil, func(pos []string) error {
		return cmdSet(pos, stderr)
	})
	c.ValidArgsFunction = func(c *cobra.Command, pos []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(pos) == 0 {
			return completeMount(c, pos, toComplete)
		}
		var policies []cobra.Completion
		for _, n := range mirror.Names {
			policies = append(policies, "read-policy="+n)
		}
		return policies, cobra.ShellCompDirectiveNoFileComp
	}
	return c
}

// cmdSet checks every limit or read policy after the mount point pos[0]
// names, then sets them on the mount in turn.
func cmdSet(pos []string, stderr io.Writer) error {
	if len(pos) < 2 {
		return usagef("want MOUNTPOINT and a limit such as 'default rbps=1MiB', got %d argument(s)", len(pos))
	}
	for _, spec := range pos[1:] {
		if name, ok := strings.CutPrefix(spec, "read-policy="); ok {
			if !slices.Contains(mirror.Names, name) {
				return usagef("%q: read policy %s: want one of %s", spec, name, strings.Join(mirror.Names, ", "))
			}
			continue
		}
		if _, err := group.ParseLimit(spec); err != nil {
			return usagef("%q: %v", spec, err)
		}
	}
	for _, spec := range pos[1:] {
		note, err := control.Set(pos[0], spec)
		if err != nil {
			return err
		}
		if note != "" {
			fmt.Fprintf(stderr, "sluice set: warning: %s\n", note)
		}
	}
	return nil
}

const resyncHelp = `Usage: sluice resync [--rate SIZE] [--wait=false] MOUNTPOINT

Makes the stale mirrors of a running mirror set equal to a healthy one and
returns them to service, while the mount keeps serving from the healthy ones.
Everything that differs is copied (contents, owners, modes, times, extended
attributes and ACLs, links), what is not in the healthy mirror is removed;
then changes are held off for a moment while what changed meanwhile is
copied, and the mirror is read and written again.
  sluice resync --rate 50MiB /mnt/data
`

// resyncFlags returns resync's flags: --rate and --wait.
func resyncFlags() (*pflag.FlagSet, *sizeFlag, *bool) {
	fs := newFlagSet("resync")
	rate := sizeFlag(0)
	fs.Var(&rate, "rate", "copy at most this many bytes a second (0: as fast as the disks go)")
	wait := fs.Bool("wait", true, "print progress every second until the resync ends, and fail if it failed")
	return fs, &rate, wait
}

// resyncCommand is sluice resync.
func resyncCommand(stdout io.Writer) *cobra.Command {
	fs, rate, wait := resyncFlags()
	c := command("resync [--rate SIZE] [--wait=false] MOUNTPOINT", "make a mirror set's stale mirrors equal again", resyncHelp, fs, func(pos []string) error {
		return cmdResync(pos, *rate, *wait, stdout)
	})
	c.ValidArgsFunction = completeMount
	return c
}

// cmdResync starts a resync of the mirror set pos names, at most rate
// bytes a second (0: no bound), and with wait follows it to its end.
func cmdResync(pos []string, rate sizeFlag, wait bool, stdout io.Writer) error {
	if len(pos) != 1 {
		return usagef("want one MOUNTPOINT, got %d argument(s)", len(pos))
	}
	if rate < 0 {
		return usagef("--rate %d: want a size of 0 or more", rate)
	}
	if err := control.Resync(pos[0], int64(rate)); err != nil {
		return err
	}
	if !wait {
		fmt.Fprintf(stdout, "resync started; see sluice stat %s\n", pos[0])
		return nil
	}
	start := time.Now()
	for {
		time.Sleep(time.Second)
		st, err := control.Stat(pos[0])
		if err != nil {
			return err
		}
		running := false
		for _, m := range st.Mirrors {
			if m.State == backing.Resyncing {
				running = true
				fmt.Fprintf(stdout, "%s: %s copied in %s\n", m.Dir, group.FormatSize(m.Resynced), time.Since(start).Round(time.Second))
			}
		}
		if running {
			continue
		}
		if st.LastResync != "ok" {
			return fmt.Errorf("resync failed: %s", st.LastResync)
		}
		for _, m := range st.Mirrors {
			fmt.Fprintf(stdout, "%s: %s (%s copied)\n", m.Dir, m.State, group.FormatSize(m.Resynced))
		}
		return nil
	}
}

const reloadHelp = `Usage: sluice reload MOUNTPOINT

Reads the config file a mount was started with (mount --config) again,
with the same command line, and applies what can change while it serves:
the groups' rules and limits and a mirror set's read policy. Requests in
flight are not dropped. A group whose limits the file no longer gives goes
back to max. A file that does not parse or check is refused with the error,
and the running configuration stays as it was. Settings that only a remount
changes (SOURCE, max-io, cache-mode, ...) are named when the file's value
differs from the one the mount runs, with both values. What was applied is
printed, and logged by the mount. SIGHUP to the mount does the same.
  sluice reload /mnt/data
`

// reloadCommand is sluice reload.
func reloadCommand(stdout, stderr io.Writer) *cobra.Command {
	c := command("reload MOUNTPOINT", "apply a mount's changed config file", reloadHelp, nil, func(pos []string) error {
		return cmdReload(pos, stdout, stderr)
	})
	c.ValidArgsFunction = completeMount
	return c
}

// cmdReload has the mount pos names read its config file again, and
// prints what it applied (warnings on stderr).
func cmdReload(pos []string, stdout, stderr io.Writer) error {
	if len(pos) != 1 {
		return usagef("want one MOUNTPOINT, got %d argument(s)", len(pos))
	}
	note, err := control.Reload(pos[0])
	if err != nil {
		return err
	}
	// The note: what was applied, a line each, then warnings.
	for _, line := range strings.Split(note, "\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "warning: "):
			fmt.Fprintf(stderr, "sluice reload: %s\n", line)
		default:
			fmt.Fprintf(stdout, "sluice reload: %s\n", line)
		}
	}
	return nil
}
