package fsys

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/backing"
)

// TestMirrorNamespaceRace: a tenant racing opens against creates and
// unlinks of one name cannot turn a mirror stale. An unlink reaches the
// mirrors one after another; an open between the two found the file gone
// on one mirror only (ESTALE), and that mirror was marked stale in about
// 0.1 s. Both mirrors must stay healthy for the whole run, and hold the
// same names at its end.
func TestMirrorNamespaceRace(t *testing.T) {
	needFUSE(t)
	dirs, mnt, _ := mirrorSet(t, 2)
	f, unmount := serve(t, mirrorOpts(dirs, mnt, "pid", nil))
	defer unmount()
	p := filepath.Join(mnt, "pub", "f")
	const run = 10 * time.Second
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var opens [3]int
	var changes [1]int
	var unexpected []error
	var mu sync.Mutex
	note := func(err error) {
		mu.Lock()
		unexpected = append(unexpected, err)
		mu.Unlock()
	}
	// One thread opens and closes the name; another creates and
	// unlinks it, both as uid 4101.
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runAsGroups(4101, 4101, nil, func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					switch w {
					case 0:
						g, err := os.Open(p)
						switch {
						case err == nil:
							g.Close()
							opens[0]++
						case errors.Is(err, syscall.ENOENT):
							opens[1]++
						case errors.Is(err, syscall.ESTALE):
							// The object the name led to was removed
							// before the open reached it, and again
							// after the kernel looked the name up anew.
							opens[2]++
						default:
							note(err)
						}
					case 1:
						if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
							note(err)
						}
						if err := os.Remove(p); err != nil && !errors.Is(err, syscall.ENOENT) {
							note(err)
						}
						changes[0]++
					}
				}
			}); err != nil {
				note(err)
			}
		}()
	}
	deadline := time.Now().Add(run)
	for time.Now().Before(deadline) {
		if s := stateOf(t, f); slices.Contains(s, backing.Stale) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d opens found the file, %d did not, %d found it removed twice (ESTALE); %d creates and unlinks",
		opens[0], opens[1], opens[2], changes[0])
	if s := stateOf(t, f); slices.Contains(s, backing.Stale) {
		t.Fatalf("mirrors %v after a tenant raced opens against creates and unlinks; want both healthy", s)
	}
	if len(unexpected) > 0 {
		t.Errorf("%d operations failed unexpectedly, the first: %v", len(unexpected), unexpected[0])
	}
	if opens[0] == 0 || opens[1] == 0 {
		t.Errorf("the opens found the file %d times and missed it %d times: no race was run", opens[0], opens[1])
	}
	for _, d := range dirs {
		if _, err := os.Lstat(filepath.Join(d, "pub", "f")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: pub/f after the last unlink: %v, want it gone", d, err)
		}
	}
}
