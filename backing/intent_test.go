package backing

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStaleMarkUnrecorded: a write that fails on one mirror marks it
// stale; when no healthy mirror can record the mark (here the state file
// cannot be written), the write fails rather than leave the set to serve
// the stale mirror again after a restart.
func TestStaleMarkUnrecorded(t *testing.T) {
	dirs := mirrorDirs(t, 2, map[string]string{"f": "0123456789"})
	faults := []*Faults{{}, {}}
	m, err := NewMirror(dirs, MirrorOptions{Now: clock(), Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := m.Lookup(RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Open(e.ID, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The state file is written through StateFile+".new": a directory
	// there makes every write of it fail.
	if err := os.Mkdir(filepath.Join(dirs[0], StateFile+".new"), 0o755); err != nil {
		t.Fatal(err)
	}
	faults[1].SetWrite(0, syscall.EIO)
	if _, err := f.WriteAt([]byte("ab"), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("a write that marked a mirror stale, the mark recorded nowhere: %v, want EIO", err)
	}
	if s := m.Stats(); s[1].State != Stale {
		t.Errorf("the mirror that failed the write is %s, want stale", s[1].State)
	}
	// Recorded: the next failure's mark is written, and writes go on.
	os.Remove(filepath.Join(dirs[0], StateFile+".new"))
	if _, err := f.WriteAt([]byte("cd"), 2); err != nil {
		t.Errorf("a write to the healthy mirror: %v", err)
	}
}

// TestIntentRecovery: a file the record names that differs between the
// mirrors (a write that reached the first mirror only) is made equal to
// the first mirror's when the set opens, and the record is emptied; a
// file named in the record and gone from the second mirror only marks it
// stale.
func TestIntentRecovery(t *testing.T) {
	dirs := mirrorDirs(t, 2, map[string]string{"f": strings.Repeat("a", 3<<20), "g": "gg"})
	m, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	var recs []intentRecord
	for _, name := range []string{"f", "g"} {
		e, err := m.Lookup(RootID, name)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := m.obj(e.ID)
		recs = append(recs, m.recordOf(o))
	}
	if len(recs[0].Handles) != 2 || recs[0].Path != "/f" {
		t.Fatalf("the record of f: %+v, want a handle per mirror and its path", recs[0])
	}
	m.Close()
	writeLog(t, dirs[0], recs[:1])
	// The write the first mirror got: a piece in the middle changed and
	// the file grown.
	want := []byte(strings.Repeat("a", 3<<20))
	copy(want[1<<20+5:], "written to the first mirror only")
	want = append(want, "tail"...)
	if err := os.WriteFile(filepath.Join(dirs[0], "f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	// And a change of its mode and an extended attribute, cut short too.
	os.Chmod(filepath.Join(dirs[0], "f"), 0o600)
	xattr := unix.Setxattr(filepath.Join(dirs[0], "f"), "user.tag", []byte("v1"), 0) == nil
	m, err = NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatalf("opening the set with f recorded and different: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dirs[1], "f")); !bytes.Equal(got, want) {
		t.Errorf("the second mirror's f after the set opened: %d bytes, not the first mirror's %d", len(got), len(want))
	}
	if s := m.Stats(); s[0].State != Healthy || s[1].State != Healthy {
		t.Errorf("mirrors %s and %s after mending f, want both healthy", s[0].State, s[1].State)
	}
	if fi, err := os.Stat(filepath.Join(dirs[1], "f")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the second mirror's f after the set opened: %v, %v; want mode 0600 as the first's", fi.Mode(), err)
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(filepath.Join(dirs[1], "f"), "user.tag", buf); xattr && (err != nil || string(buf[:n]) != "v1") {
		t.Errorf("the second mirror's f after the set opened: user.tag %q, %v; want v1 as the first's", buf[:max(n, 0)], err)
	}
	m.Close()
	if b, _ := os.ReadFile(filepath.Join(dirs[0], IntentFile)); len(parseLog(b)) != 0 {
		t.Errorf("the record after the set opened: %v, want it empty", parseLog(b))
	}

	// g gone from the second mirror only, with the record naming it.
	writeLog(t, dirs[0], recs[1:])
	os.Remove(filepath.Join(dirs[1], "g"))
	m, err = NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatalf("opening the set with g recorded and gone from one mirror: %v", err)
	}
	defer m.Close()
	if s := m.Stats(); s[0].State != Healthy || s[1].State != Stale {
		t.Errorf("mirrors %s and %s with g gone from the second, want healthy and stale", s[0].State, s[1].State)
	}
}

// writeLog makes dir's IntentFile record recs, as a set stopped while
// writing them leaves it: the frames of a fresh log, then one more of a
// change never acknowledged, torn by the stop.
func writeLog(t *testing.T, dir string, recs []intentRecord) {
	t.Helper()
	l, err := newIntentLog(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	var ops []intentOp
	for i := range recs {
		ops = append(ops, intentOp{ID: uint64(i + 1), Rec: &recs[i]})
	}
	torn := appendFrames(nil, []intentOp{{ID: 99, Rec: &intentRecord{Path: "/never"}}})
	if err := l.append(append(appendFrames(nil, ops), torn[:len(torn)-3]...), true); err != nil {
		t.Fatal(err)
	}
}

// TestIntentLog: a log records what its frames say, up to a torn or
// missing frame, and one with no room left is made anew with what is
// recorded then.
func TestIntentLog(t *testing.T) {
	dir := t.TempDir()
	l, err := newIntentLog(dir, map[uint64]intentRecord{7: {Path: "/seven"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	big := strings.Repeat("x", 1000)
	for i := uint64(100); ; i++ {
		err := l.append(appendFrames(nil, []intentOp{{ID: i, Rec: &intentRecord{Path: big}}, {Del: []uint64{i}}}), false)
		if err == errLogFull {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 100+intentLogSize {
			t.Fatal("the log never filled")
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, IntentFile))
	if got := parseLog(b); len(got) != 1 || got[7].Path != "/seven" {
		t.Errorf("a full log records %v, want only 7", got)
	}
	// A frame whose payload changed ends the log there.
	l.append(appendFrames(nil, []intentOp{{ID: 8, Rec: &intentRecord{Path: "/eight"}}}), false)
	b[len(b)-1] ^= 1
	if got := parseLog(b); got[8].Path != "" {
		t.Errorf("a log past a damaged frame records %v", got)
	}
	if got := parseLog(nil); len(got) != 0 {
		t.Errorf("an empty log records %v", got)
	}
}

// TestIntentRecoveryFollowsFirst: a stop that cut short a rename and a
// removal, done on the first mirror and not on the second, leaves a file
// the record names gone from the first and still in the second. The
// first mirror is the one changes reach first, so the second is behind:
// it is marked stale and the set opens, whatever order the record gives
// the file and its directory in. Before, the directory's record marked the
// second stale, the file's the first, and the set refused to open.
func TestIntentRecoveryFollowsFirst(t *testing.T) {
	for _, order := range []string{"directory first", "file first"} {
		t.Run(order, func(t *testing.T) {
			dirs := mirrorDirs(t, 2, nil)
			for _, d := range dirs {
				os.Mkdir(filepath.Join(d, "d"), 0o755)
				os.WriteFile(filepath.Join(d, "d", "f20"), nil, 0o644)
				os.Mkdir(filepath.Join(d, "d", "d20"), 0o755)
			}
			m, err := NewMirror(dirs, MirrorOptions{Now: clock()})
			if err != nil {
				t.Fatal(err)
			}
			d, err := m.Lookup(RootID, "d")
			if err != nil {
				t.Fatal(err)
			}
			f, err := m.Lookup(d.ID, "f20")
			if err != nil {
				t.Fatal(err)
			}
			od, _ := m.obj(d.ID)
			of, _ := m.obj(f.ID)
			recs := []intentRecord{m.recordOf(od), m.recordOf(of)}
			if order == "file first" {
				recs[0], recs[1] = recs[1], recs[0]
			}
			m.Close()
			writeLog(t, dirs[0], recs)
			// mv f20 g20 && rm g20, on the first mirror only.
			os.Rename(filepath.Join(dirs[0], "d", "f20"), filepath.Join(dirs[0], "d", "g20"))
			os.Remove(filepath.Join(dirs[0], "d", "g20"))
			var log strings.Builder
			m, err = NewMirror(dirs, MirrorOptions{Now: clock(), Log: func(format string, a ...any) { fmt.Fprintf(&log, format+"\n", a...) }})
			if err != nil {
				t.Fatalf("opening the set: %v; log:\n%s", err, log.String())
			}
			defer m.Close()
			if s := m.Stats(); s[0].State != Healthy || s[1].State != Stale {
				t.Errorf("mirrors %s and %s, want the first healthy and the second stale; log:\n%s", s[0].State, s[1].State, log.String())
			}
			if strings.Contains(log.String(), "bad file descriptor") {
				t.Errorf("the log speaks of a file it never opened:\n%s", log.String())
			}
		})
	}
}
