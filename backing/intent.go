package backing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sluice/resync"
)

// IntentFile is the name, in each healthy mirror's root, of the set's
// record of the regular files being written. A write reaches the mirrors
// one after another, so a daemon stopped between two of them (killed, or
// the machine losing power) leaves the file different on each. The record
// names every file with a write begun since its data was last known
// durable on every mirror: it is made durable before the first of those
// writes starts, and a file leaves it only once its writes have ended and
// every mirror's file system has been synced since. When the set is
// opened, each file the record names is compared on the healthy mirrors
// and made equal to the first of them (the mirror every write reaches
// first), or the mirror that cannot be made equal is marked stale.
const IntentFile = ".sluice-mirror.intent"

// intentLinger is how long a file stays in the record after its last
// write ended: files written again within it cost no write of the record.
const intentLinger = time.Second

// intentRecord names one file: its handle in each mirror, by the mirror's
// identity (open_by_handle_at reaches it whatever its names), and its path
// from the root when it was recorded, for file systems without handles.
type intentRecord struct {
	Handles map[string]recordedHandle `json:"handles,omitempty"`
	Path    string                    `json:"path,omitempty"`
}

type recordedHandle struct {
	Type  int32  `json:"type"`
	Bytes []byte `json:"bytes"`
}

// intents is the set's record of the files being written.
type intents struct {
	m       *Mirror
	mu      sync.Mutex
	cond    sync.Cond
	entries map[*mobj]*intent
	logs    []*intentLog // per mirror; nil where none is open
	nextID  uint64
	pending []intentOp // changes not yet in the logs
	gen     uint64     // counts changes of entries
	saved   uint64     // the gen the logs hold
	saving  bool       // a write of the logs is under way
	stop    chan struct{}
	done    chan struct{}
}

type intent struct {
	id      uint64
	rec     intentRecord
	holders int       // mirrors holding the object when rec was made
	writing int       // writes in flight
	begun   uint64    // writes begun, for the clearer to see new ones
	ended   time.Time // when the last write ended
}

// newIntents makes an empty log in every healthy mirror and starts
// clearing it.
func newIntents(m *Mirror) (*intents, error) {
	in := &intents{m: m, entries: map[*mobj]*intent{}, logs: make([]*intentLog, len(m.dirs)),
		stop: make(chan struct{}), done: make(chan struct{})}
	in.cond.L = &in.mu
	for i, dir := range m.dirs {
		if m.set.Stale(i) {
			continue
		}
		l, err := newIntentLog(dir, nil)
		if err != nil {
			in.closeLogs()
			return nil, fmt.Errorf("mirror %s: %s: %v", dir, IntentFile, err)
		}
		in.logs[i] = l
	}
	go in.clear()
	return in, nil
}

// begin records o as being written, durably before it returns when o is
// not recorded yet, and returns the call that ends the write. An error
// says the record could not be written on any mirror: the write must not
// start.
func (in *intents) begin(o *mobj) (end func(), err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	e := in.entries[o]
	if h := in.m.holders(o); e == nil || e.holders != h {
		// New, or a mirror resynced since holds it too: the record
		// must name it there as well.
		if e == nil {
			in.nextID++
			e = &intent{id: in.nextID}
			in.entries[o] = e
		}
		e.rec, e.holders = in.m.recordOf(o), h
		rec := e.rec
		in.pending = append(in.pending, intentOp{ID: e.id, Rec: &rec})
		in.gen++
	}
	e.writing++
	e.begun++
	if err := in.flushLocked(in.gen); err != nil {
		e.writing--
		return nil, err
	}
	return func() {
		in.mu.Lock()
		e.writing--
		e.ended = time.Now()
		in.mu.Unlock()
	}, nil
}

// flushLocked returns once generation gen of the entries (or a later one)
// is in the logs, writing them itself unless a write is under way.
// Called with mu held.
func (in *intents) flushLocked(gen uint64) error {
	for in.saved < gen {
		if in.saving {
			in.cond.Wait()
			continue
		}
		in.saving = true
		g, ops := in.gen, in.pending
		in.pending = nil
		all := map[uint64]intentRecord{}
		for _, e := range in.entries {
			all[e.id] = e.rec
		}
		in.mu.Unlock()
		err := in.write(appendFrames(nil, ops), all)
		in.mu.Lock()
		in.saving = false
		in.cond.Broadcast()
		if err != nil {
			in.pending = append(ops, in.pending...)
			return err
		}
		in.saved = max(in.saved, g)
	}
	return nil
}

// write appends frames to the log of every healthy mirror, synced, or
// makes the log anew with all when it has no room (or the mirror has none
// yet: a resynced one). It fails only when no mirror's log took them.
// Called by the one writer of the logs, without mu.
func (in *intents) write(frames []byte, all map[uint64]intentRecord) error {
	m := in.m
	m.mu.Lock()
	live, dirs := slices.Clone(m.set.Live()), m.dirs
	m.mu.Unlock()
	// The mirrors' disks flush at once.
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for k, i := range live {
		wg.Go(func() {
			l := in.logs[i]
			err := errLogFull
			if l != nil {
				err = l.append(frames, true)
			}
			if err == errLogFull {
				l.close()
				l, err = newIntentLog(dirs[i], all)
				in.logs[i] = l
			}
			errs[k] = err
		})
	}
	wg.Wait()
	var first error
	wrote := false
	for k, i := range live {
		if err := errs[k]; err != nil {
			m.log("mirror %s: recording the files being written: %v", dirs[i], err)
			first = cmpOr(first, err)
			continue
		}
		wrote = true
	}
	if !wrote {
		return fmt.Errorf("recording the files being written: %w", cmpOr(first, syscall.EIO))
	}
	return nil
}

// clear takes out of the record, every intentLinger, the files whose
// writes ended at least that long ago, once every healthy mirror's file
// system has been synced since.
func (in *intents) clear() {
	defer close(in.done)
	t := time.NewTicker(intentLinger / 2)
	defer t.Stop()
	for {
		select {
		case <-in.stop:
			return
		case <-t.C:
		}
		in.clearIdle(intentLinger)
	}
}

// clearIdle takes out of the record the files with no write for linger,
// once every healthy mirror's file system has been synced.
func (in *intents) clearIdle(linger time.Duration) {
	in.mu.Lock()
	idle := map[*mobj]uint64{}
	for o, e := range in.entries {
		if e.writing == 0 && time.Since(e.ended) >= linger {
			idle[o] = e.begun
		}
	}
	in.mu.Unlock()
	if len(idle) == 0 {
		return
	}
	if err := in.m.syncLive(); err != nil {
		in.m.log("mirror set: syncing the mirrors before clearing the record of files written: %v", err)
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	var del []uint64
	for o, begun := range idle {
		if e := in.entries[o]; e != nil && e.writing == 0 && e.begun == begun {
			delete(in.entries, o)
			del = append(del, e.id)
		}
	}
	if len(del) == 0 {
		return
	}
	in.pending = append(in.pending, intentOp{Del: del})
	in.gen++
	if err := in.flushLocked(in.gen); err != nil {
		in.m.log("mirror set: recording the files written: %v", err)
	}
}

// close stops the clearing and clears every file no write is under way
// on: a set closed cleanly leaves nothing to compare when it opens.
func (in *intents) close() {
	close(in.stop)
	<-in.done
	in.clearIdle(0)
	in.closeLogs()
}

func (in *intents) closeLogs() {
	for _, l := range in.logs {
		l.close()
	}
}

// holders counts the healthy mirrors holding o.
func (m *Mirror) holders(o *mobj) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, i := range m.set.Live() {
		if o.sub[i] != 0 {
			n++
		}
	}
	return n
}

// recordOf names o as the record keeps it.
func (m *Mirror) recordOf(o *mobj) intentRecord {
	var rec intentRecord
	for i, sub := range o.sub {
		if sub == 0 || i >= len(m.trees) {
			continue
		}
		l, ok := m.trees[i].(*Local)
		if !ok {
			continue
		}
		if ht, h, ok := l.fileHandle(sub); ok {
			if rec.Handles == nil {
				rec.Handles = map[string]recordedHandle{}
			}
			rec.Handles[m.self[i]] = recordedHandle{Type: ht, Bytes: h}
		}
	}
	m.mu.Lock()
	src := -1
	if live := m.set.Live(); len(live) > 0 {
		src = live[0]
	}
	m.mu.Unlock()
	if src >= 0 {
		if p, ok := m.pathOf(src, o); ok {
			rec.Path = p
		}
	}
	return rec
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// syncLive syncs the file system of every healthy mirror (syncfs).
func (m *Mirror) syncLive() error {
	m.mu.Lock()
	live, dirs := slices.Clone(m.set.Live()), m.dirs
	m.mu.Unlock()
	for _, i := range live {
		fd, err := unix.Open(dirs[i], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = unix.Syncfs(fd)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", dirs[i], err)
		}
	}
	return nil
}

// writeDurable replaces dir/name with data: written to a new file, synced,
// renamed into place, and the directory synced.
func writeDurable(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".new")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// recoverIntents, as the set opens, makes the files its record names equal
// on the healthy mirrors, from the first of them, and marks stale a mirror
// on which one cannot be. It reports what it did through the log.
func (m *Mirror) recoverIntents() error {
	var recs []intentRecord
	seen := map[string]bool{}
	for i, dir := range m.dirs {
		if m.set.Stale(i) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, IntentFile))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("mirror %s: %v", dir, err)
		}
		for _, r := range parseLog(b) {
			k, _ := json.Marshal(r)
			if !seen[string(k)] {
				seen[string(k)] = true
				recs = append(recs, r)
			}
		}
	}
	if len(recs) > 0 {
		m.log("mirror set: %d files were being written when the set was last stopped; comparing them", len(recs))
	}
	roots := make([]int, len(m.dirs))
	for i := range roots {
		roots[i] = -1
	}
	defer func() {
		for _, fd := range roots {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	for i, dir := range m.dirs {
		if m.set.Stale(i) {
			continue
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("mirror %s: %v", dir, err)
		}
		roots[i] = fd
	}
	stale := m.set.StaleMarks()
	marked := false
	for _, r := range recs {
		for _, i := range m.reconcile(r, roots) {
			// A mirror found stale is no longer compared: what it holds
			// says nothing of what the others should.
			stale[i] = true
			marked = true
			unix.Close(roots[i])
			roots[i] = -1
		}
	}
	if marked {
		if m.set.SetStale(stale) != nil {
			return fmt.Errorf("every mirror is stale after comparing the files being written when the set was last stopped")
		}
		m.mu.Lock()
		err := m.saveState()
		m.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil // newIntents makes the logs anew
}

// reconcile makes the file r names equal on the mirrors still compared
// (roots[i] >= 0), from the first of them, and returns the mirrors that
// must be marked stale: where it differs and cannot be copied, or where
// it is in one of the two and not in the other. A directory r names must
// hold the same entries (names and types; in the root, less the set's own
// files) on every mirror, or the mirror is stale.
//
// The first mirror is the one to follow: every change reaches the
// mirrors in their order (Mirror.fan), so a change the stop cut short
// reached the first and not a later one, never the other way round. A
// file removed or renamed on the first alone is still in a later one, and
// that later one is behind. The first is marked stale only when the file
// cannot be opened on it for another reason than its being gone; the
// next mirror is then the one to follow.
func (m *Mirror) reconcile(r intentRecord, roots []int) (stale []int) {
	fds := make([]int, len(m.dirs))
	errs := make([]error, len(m.dirs))
	for i := range fds {
		fds[i] = -1
	}
	defer func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	name, what := r.Path, "file"
	if name == "" {
		name = "an object"
	}
	src := -1
	for i := range m.dirs {
		if roots[i] < 0 {
			continue
		}
		fds[i], errs[i] = openRecorded(roots[i], r, m.self[i])
		if src >= 0 {
			continue
		}
		if errs[i] != nil && !gone(errs[i]) {
			m.log("mirror %s: opening %s, which was being changed when the set was last stopped: %v: the mirror is stale", m.dirs[i], name, errs[i])
			stale = append(stale, i)
			continue
		}
		src = i
	}
	if src < 0 {
		return stale
	}
	if fds[src] < 0 {
		// Gone from the mirror to follow: a later mirror still holding
		// it by a name is behind.
		for i := src + 1; i < len(m.dirs); i++ {
			if fds[i] < 0 {
				continue
			}
			var st unix.Stat_t
			if err := unix.Fstat(fds[i], &st); err != nil || st.Nlink > 0 {
				m.log("mirror %s: %s %s was being changed when the set was last stopped and is still in it, while it is gone from %s: the mirror is stale", m.dirs[i], what, name, m.dirs[src])
				stale = append(stale, i)
			}
		}
		return stale
	}
	var sst unix.Stat_t
	if err := unix.Fstat(fds[src], &sst); err != nil {
		return stale
	}
	dir := sst.Mode&unix.S_IFMT == unix.S_IFDIR
	var want map[string]fs.FileMode
	if dir {
		what = "directory"
		var err error
		if want, err = dirEntries(fds[src], r.Path == "/"); err != nil {
			return stale
		}
	}
	for i := src + 1; i < len(m.dirs); i++ {
		if roots[i] < 0 {
			continue
		}
		switch {
		case fds[i] < 0:
			if sst.Nlink > 0 {
				m.log("mirror %s: %s %s was being changed when the set was last stopped and is not in it, while it is in %s: the mirror is stale", m.dirs[i], what, name, m.dirs[src])
				stale = append(stale, i)
			}
			continue
		case dir:
			// A namespace change cut short, which only a resync mends.
			if got, err := dirEntries(fds[i], r.Path == "/"); err != nil || !maps.Equal(got, want) {
				m.log("mirror %s: directory %s was being changed when the set was last stopped and holds other entries than in %s: the mirror is stale (sluice resync mends it)", m.dirs[i], name, m.dirs[src])
				stale = append(stale, i)
				continue
			}
		default:
			n, err := copyIfDiffers(fds[src], fds[i], sst.Size)
			switch {
			case err != nil:
				m.log("mirror %s: making %s equal to %s's after an interrupted write: %v: the mirror is stale", m.dirs[i], name, m.dirs[src], err)
				stale = append(stale, i)
				continue
			case n > 0:
				m.log("mirror %s: %s differed from %s's after an interrupted write (%d bytes copied)", m.dirs[i], name, m.dirs[src], n)
			}
		}
		// Owner, mode, extended attributes and times as on the first
		// mirror: a change of them may have been cut short too.
		if err := copyMeta(fds[src], fds[i], &sst); err != nil {
			m.log("mirror %s: giving %s the attributes it has in %s after an interrupted change: %v: the mirror is stale", m.dirs[i], name, m.dirs[src], err)
			stale = append(stale, i)
		}
	}
	return stale
}

// gone reports whether err, of opening a recorded file, says that it is
// no longer there: removed (by handle, ESTALE), or its name now something
// else or nothing.
func gone(err error) bool {
	return err == syscall.ENOENT || err == syscall.ESTALE || err == syscall.ENOTDIR || err == syscall.ELOOP
}

// dirEntries returns the names and types in the directory open as fd
// (resync.Types), less the set's own files when root.
func dirEntries(fd int, root bool) (map[string]fs.FileMode, error) {
	out, err := resync.Types(fd)
	if err != nil || !root {
		return out, err
	}
	maps.DeleteFunc(out, func(name string, _ fs.FileMode) bool { return IsStateFile(name) })
	return out, nil
}

// openRecorded opens, in the mirror whose root is root and identity id,
// the regular file or directory r names, never waiting: a file for
// reading and writing, a directory for reading.
func openRecorded(root int, r intentRecord, id string) (int, error) {
	const flags = unix.O_NONBLOCK | unix.O_NOFOLLOW | unix.O_CLOEXEC
	open := func(mode int) (int, error) {
		if h, ok := r.Handles[id]; ok {
			return unix.OpenByHandleAt(root, unix.NewFileHandle(h.Type, h.Bytes), flags|mode)
		}
		if r.Path != "" {
			return unix.Openat2(root, trimRoot(r.Path), &unix.OpenHow{Flags: uint64(flags | mode), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH})
		}
		return -1, syscall.ENOENT
	}
	fd, err := open(unix.O_RDWR)
	if err == syscall.EISDIR {
		fd, err = open(unix.O_RDONLY | unix.O_DIRECTORY)
	}
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return -1, syscall.ENOENT
	}
	return fd, nil
}

func trimRoot(p string) string {
	for len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	if p == "" {
		return "."
	}
	return p
}

// copyIfDiffers makes dst's content src's, whose size is size: the pieces
// that differ are written, then dst is cut to size and synced. It returns
// the bytes changed (written, or cut off); any short or failed write is an
// error.
func copyIfDiffers(src, dst int, size int64) (int64, error) {
	const chunk = 1 << 20
	a, b := make([]byte, chunk), make([]byte, chunk)
	var written int64
	for off := int64(0); off < size; off += chunk {
		want := int(min(chunk, size-off))
		na, err := io.ReadFull(io.NewSectionReader(fdReader(src), off, int64(want)), a[:want])
		if err != nil {
			return written, fmt.Errorf("reading at %d: %w", off, err)
		}
		nb, _ := io.ReadFull(io.NewSectionReader(fdReader(dst), off, int64(want)), b[:want])
		if nb == na && bytes.Equal(a[:na], b[:nb]) {
			continue
		}
		for done := 0; done < na; {
			n, err := unix.Pwrite(dst, a[done:na], off+int64(done))
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return written, fmt.Errorf("writing at %d: %w", off+int64(done), err)
			}
			if n <= 0 {
				return written, fmt.Errorf("writing at %d: %w", off+int64(done), io.ErrShortWrite)
			}
			done += n
			written += int64(n)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(dst, &st); err != nil {
		return written, err
	}
	if st.Size > size {
		if err := unix.Ftruncate(dst, size); err != nil {
			return written, fmt.Errorf("cutting to %d bytes: %w", size, err)
		}
		written += st.Size - size
	}
	if written > 0 {
		if err := unix.Fdatasync(dst); err != nil {
			return written, err
		}
	}
	return written, nil
}

// fdReader reads a descriptor at offsets.
type fdReader int

func (r fdReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := unix.Pread(int(r), p, off)
	if err != nil {
		return max(n, 0), err
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}
