// Command metaops times metadata operations on many small files: create
// (open O_CREAT|O_EXCL, close), lstat and unlink, spread over directories
// and parallel workers. The load of bench/metadata.sh.
//
//	metaops -dir DIR [-files 20000] [-dirs 20] [-threads 2] [-phases create,stat,unlink]
//
// The files live in DIR/d000 ... DIR/dNNN; worker k handles directories
// k, k+threads, k+2*threads, ... The create phase makes DIR and its
// directories first (untimed); the unlink phase removes them afterwards
// (untimed). Each phase prints one JSON line:
//
//	{"phase":"create","ops":20000,"seconds":1.93,"ops_per_s":10362}
//
// Phases run in the order given, so one process can run all three, or the
// caller can run them one at a time (and drop caches in between).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

type result struct {
	Phase   string  `json:"phase"`
	Ops     int     `json:"ops"`
	Seconds float64 `json:"seconds"`
	OpsPerS float64 `json:"ops_per_s"`
}

func main() {
	dir := flag.String("dir", "", "directory to work in (created by the create phase)")
	files := flag.Int("files", 20000, "number of files in all")
	dirs := flag.Int("dirs", 20, "number of directories the files are spread over")
	threads := flag.Int("threads", 2, "parallel workers; each handles every threads-th directory")
	phases := flag.String("phases", "create,stat,unlink", "phases to run, in order: create, stat, unlink")
	flag.Parse()
	if *dir == "" || *files < 1 || *dirs < 1 || *threads < 1 || *files%*dirs != 0 {
		fmt.Fprintln(os.Stderr, "usage: metaops -dir DIR [-files N] [-dirs D] [-threads T] [-phases create,stat,unlink]")
		fmt.Fprintln(os.Stderr, "  (-files must be a multiple of -dirs)")
		os.Exit(2)
	}
	perDir := *files / *dirs
	dirName := func(d int) string { return filepath.Join(*dir, fmt.Sprintf("d%03d", d)) }
	fileName := func(d, i int) string { return filepath.Join(dirName(d), fmt.Sprintf("f%05d", i)) }

	ops := map[string]func(d, i int) error{
		"create": func(d, i int) error {
			fd, err := syscall.Open(fileName(d, i), syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
			if err != nil {
				return err
			}
			return syscall.Close(fd)
		},
		"stat": func(d, i int) error {
			var st syscall.Stat_t
			if err := syscall.Lstat(fileName(d, i), &st); err != nil {
				return err
			}
			if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
				return fmt.Errorf("not a regular file (mode %#o)", st.Mode)
			}
			return nil
		},
		"unlink": func(d, i int) error { return syscall.Unlink(fileName(d, i)) },
	}

	enc := json.NewEncoder(os.Stdout)
	for _, phase := range strings.Split(*phases, ",") {
		op, ok := ops[phase]
		if !ok {
			fatal(fmt.Errorf("unknown phase %q (create, stat, unlink)", phase))
		}
		if phase == "create" {
			for d := 0; d < *dirs; d++ {
				if err := os.MkdirAll(dirName(d), 0o755); err != nil {
					fatal(err)
				}
			}
		}
		secs := run(*threads, *dirs, perDir, phase, op, fileName)
		enc.Encode(result{Phase: phase, Ops: *files, Seconds: secs, OpsPerS: float64(*files) / secs})
		if phase == "unlink" {
			for d := 0; d < *dirs; d++ {
				if err := os.Remove(dirName(d)); err != nil {
					fatal(err)
				}
			}
			os.Remove(*dir)
		}
	}
}

// run times one phase: threads workers, each over its share of the
// directories, file by file. The first error ends the program.
func run(threads, dirs, perDir int, phase string, op func(d, i int) error, name func(d, i int) string) float64 {
	var wg sync.WaitGroup
	errs := make(chan error, threads)
	start := time.Now()
	for k := 0; k < threads; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := k; d < dirs; d += threads {
				for i := 0; i < perDir; i++ {
					if err := op(d, i); err != nil {
						errs <- fmt.Errorf("%s %s: %w", phase, name(d, i), err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	close(errs)
	if err := <-errs; err != nil {
		fatal(err)
	}
	return secs
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "metaops:", err)
	os.Exit(1)
}
