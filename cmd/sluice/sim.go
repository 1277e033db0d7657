package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sluice/sim"
)

type simOpts struct {
	compare string
	csv     string
	plot    string
	check   bool
}

// simFlags returns sim's flags, bound to the options it returns.
func simFlags() (*pflag.FlagSet, *simOpts) {
	o := &simOpts{}
	fs := newFlagSet("sim")
	fs.StringVar(&o.compare, "compare", "", "run once per value of a [mount] key and print the runs side by side, e.g. readahead-budget=off,on or max-io=128KiB,1MiB; default: the scenario's own compare, none for a single run")
	fs.StringVar(&o.csv, "csv", "", "write the time series (MiB/s per group and device per 100 ms) to this CSV file")
	fs.StringVar(&o.plot, "plot", "", "draw the time series to this file (.svg, .png or .pdf)")
	fs.BoolVar(&o.check, "check", false, "assert the scenario's [[expect]] entries; exit 1 if one fails")
	flagDoc(fs, "", map[string]string{"compare": "KEY=V1,V2...", "csv": "FILE", "plot": "FILE"})
	return fs, o
}

// simCommand is sluice sim.
func simCommand(stdout io.Writer) *cobra.Command {
	fs, o := simFlags()
	c := command("sim [flags] SCENARIO.toml", "run a scenario on virtual time", simHelp, fs, func(pos []string) error {
		return cmdSim(pos, o, stdout)
	})
	c.ValidArgsFunction = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"toml"}, cobra.ShellCompDirectiveFilterFileExt
	}
	c.RegisterFlagCompletionFunc("plot", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"svg", "png", "pdf"}, cobra.ShellCompDirectiveFilterFileExt
	})
	c.RegisterFlagCompletionFunc("csv", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"csv"}, cobra.ShellCompDirectiveFilterFileExt
	})
	return c
}

const simHelp = `Usage: sluice sim [flags] SCENARIO.toml

Runs a scenario on virtual time: modelled devices (and mirror sets),
groups and limits, sluice's mount options and fio-like jobs, through the
same policy code (stack, throttle, readahead, mirror) that 'sluice mount'
runs. Prints fio-like results per job, the groups' counters as 'sluice
stat' shows them, and the devices'. The same scenario and seed give the
same output, byte for byte. write-throttle=writeback models the kernel's
own write path (dirty page cache, a throttled flusher, sync) to compare
with sluice's pacing at write(). As on the mount, groups without a limit,
and limited ones that cache-mode serves so, read through a model of the
kernel's page cache and readahead; write-cache=true puts writes there too.

  sluice sim scenarios/000-readahead-1MBps.toml
  sluice sim --compare cache-mode=direct,kernel scenarios/002-readahead-10MBps.toml
  sluice sim --compare readahead-budget=off,on --plot ra.svg scenarios/000-readahead-1MBps.toml
  sluice sim scenarios/003-writeback-sync.toml
  sluice sim --compare read-policy=pid,latency scenarios/004-mirrors-nvme-ssd.toml

The file format is described in scenarios/README.md.
`

// cmdSim runs the scenario pos names as o asks.
func cmdSim(pos []string, o *simOpts, stdout io.Writer) error {
	if len(pos) != 1 {
		return usagef("want one SCENARIO.toml, got %d arguments", len(pos))
	}
	sc, err := sim.Load(pos[0])
	if err != nil {
		return err
	}
	key, values := "", []string(nil)
	if o.compare == "" {
		o.compare = sc.CompareDefault
	}
	if o.compare != "" && o.compare != "none" {
		if key, values, err = sim.ParseCompare(o.compare); err != nil {
			return usageError{err}
		}
	}
	runs, err := sim.RunCompare(sc, key, values)
	if err != nil {
		if strings.HasPrefix(err.Error(), "--compare") {
			return usageError{err}
		}
		return err
	}
	if sc.Name != "" {
		fmt.Fprintf(stdout, "%s\n\n", sc.Name)
	}
	for _, res := range runs {
		res.Write(stdout)
		fmt.Fprintln(stdout)
	}
	sim.WriteComparison(stdout, sc, runs)
	if o.csv != "" {
		f, err := os.Create(o.csv)
		if err != nil {
			return err
		}
		sim.WriteCSV(f, runs)
		if err := f.Close(); err != nil {
			return err
		}
	}
	if o.plot != "" {
		if err := sim.SavePlot(o.plot, sc.Name, runs); err != nil {
			return err
		}
	}
	if o.check {
		return checkSim(sc, runs, stdout)
	}
	return nil
}

// checkSim asserts the scenario's [[expect]] entries: an error lists those
// that failed, the pending ones (targets not met yet) marked so; a pending
// one that holds is said to, for its mark to go.
func checkSim(sc *sim.Scenario, runs []*sim.Result, stdout io.Writer) error {
	var bad []string
	pending := 0
	fmt.Fprintln(stdout)
	for _, o := range sim.Outcomes(sc, runs) {
		switch {
		case !o.Held:
			bad = append(bad, o.String())
			if o.Pending != "" {
				pending++
			}
		case o.Pending != "":
			fmt.Fprintf(stdout, "holds, though marked pending (%s): %s\n", o.Pending, o.Line)
		default:
			fmt.Fprintf(stdout, "holds: %s\n", o.Line)
		}
	}
	switch {
	case len(bad) == 0:
		fmt.Fprintf(stdout, "all %d expectations hold\n", len(sc.Expect))
		return nil
	case pending > 0:
		return fmt.Errorf("expectations failed, %d of them pending (targets not met yet):\n  %s", pending, strings.Join(bad, "\n  "))
	}
	return fmt.Errorf("expectations failed:\n  %s", strings.Join(bad, "\n  "))
}
