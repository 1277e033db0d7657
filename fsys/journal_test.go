package fsys

import (
	"encoding/json"
	"math"
	"os"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"sluice/backing"
	"sluice/throttle"
)

// TestRecord: a supervisor's record of a mount, made of journal messages
// and the descriptors they bring, gives the state a new process adopts:
// objects forgotten and files and directories closed are gone (their
// descriptors closed), the latest object of an inode is the one found by
// it, every object but the root has the references its slot holds (more
// than the kernel can forget where it has none), files of objects never
// entered are left out, listings go on from the kernel's offset, and
// every index names the descriptor it was sent as.
func TestRecord(t *testing.T) {
	dir := t.TempDir()
	open := func(path string, flags int) int {
		t.Helper()
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	ino := func(fd int) uint64 {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatalf("descriptor %d: %v", fd, err)
		}
		return st.Ino
	}
	r := NewRecord()
	defer r.Close()
	// The reference counts' memory: object 3's slot, 2, says 5.
	mfd, err := unix.MemfdCreate("refs", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(mfd)
	unix.Ftruncate(mfd, 64)
	unix.Pwrite(mfd, []byte{5, 0, 0, 0, 0, 0, 0, 0}, 16)
	if err := r.MapRefs(mfd); err != nil {
		t.Fatal(err)
	}
	apply := func(m JournalMsg, fds ...int) {
		t.Helper()
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Apply(b, fds); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(dir+"/f", []byte("x"), 0o644)
	os.Mkdir(dir+"/d", 0o755)
	// The mount's descriptor is of another directory than the root's, so
	// that an index off by one shows.
	conn, root, mount := open("/dev/null", unix.O_RDWR), open(dir, unix.O_PATH), open(dir+"/d", unix.O_RDONLY)
	connIno, rootIno, mountIno := ino(conn), ino(root), ino(mount)
	apply(JournalMsg{Kind: jStart, Fuse: &fuse.Handoff{Fd: 0, MaxWrite: maxWrite, RetrieveNext: 7},
		Tree: &backing.LocalState{NextID: 2, Mounts: []backing.LocalMount{{MountID: 5, Fd: 2}},
			Objects: []backing.LocalObject{{ID: backing.RootID, Ino: rootIno, Mode: syscall.S_IFDIR, Refs: 1, Fd: 1}}}},
		conn, root, mount)
	if !r.Started() {
		t.Fatal("not started after the start message")
	}
	apply(JournalMsg{Kind: jEnter, Object: &backing.LocalObject{ID: 2, Dev: 1, Ino: 10, Handle: []byte{1}, MountID: 5, Refs: 1, Fd: -1}})
	apply(JournalMsg{Kind: jEnter, Object: &backing.LocalObject{ID: 3, Dev: 1, Ino: 10, Handle: []byte{2}, MountID: 5, Refs: 1, Slot: 2, Fd: -1}})
	pinned := open(dir+"/d", unix.O_PATH)
	apply(JournalMsg{Kind: jEnter, Object: &backing.LocalObject{ID: 4, Dev: 1, Ino: 11, Refs: 1, Fd: 0}}, pinned)
	apply(JournalMsg{Kind: jDrop, ID: 4})
	if _, err := unix.FcntlInt(uintptr(pinned), unix.F_GETFD, 0); err == nil {
		t.Error("the descriptor of an object forgotten is still open")
	}
	file, gone, stray := open(dir+"/f", unix.O_RDONLY), open(dir+"/f", unix.O_RDONLY), open(dir+"/f", unix.O_RDONLY)
	fileIno := ino(file)
	apply(JournalMsg{Kind: jFile, File: &FileState{Fh: 1, ID: 3, Fd: 0, Opener: "a", Charged: "a"}}, file)
	apply(JournalMsg{Kind: jFile, File: &FileState{Fh: 2, ID: 3, Fd: 0}}, gone)
	apply(JournalMsg{Kind: jFile, File: &FileState{Fh: 3, ID: 99, Fd: 0}}, stray)
	apply(JournalMsg{Kind: jClose, Fh: 2})
	if _, err := unix.FcntlInt(uintptr(gone), unix.F_GETFD, 0); err == nil {
		t.Error("the descriptor of a file closed is still open")
	}
	dfd := open(dir+"/d", unix.O_RDONLY)
	dirIno := ino(dfd)
	apply(JournalMsg{Kind: jDir, Dir: &DirState{Fh: 1, ID: 2, Fd: 0, Offset: 42}}, dfd)
	apply(JournalMsg{Kind: jBacking, ID: 3, Backing: 9})
	apply(JournalMsg{Kind: jGroups, Groups: &HandoverState{LimitsOrder: []string{"a"}, Limits: map[string]throttle.Limits{"a": {}}}})

	st, fds, err := r.State()
	if err != nil {
		t.Fatal(err)
	}
	if st.Fuse.Fd != 0 || ino(fds[0]) != connIno || st.Fuse.RetrieveNext <= 7 {
		t.Errorf("the connection: %+v, descriptor of inode %d, want index 0 of inode %d and retrieves above 7", st.Fuse, ino(fds[0]), connIno)
	}
	tree := func(i int) int { return fds[1+i] } // tree indexes start after the connection
	if len(st.Tree.Mounts) != 1 || st.Tree.Mounts[0].MountID != 5 || ino(tree(st.Tree.Mounts[0].Fd)) != mountIno {
		t.Errorf("mounts %+v", st.Tree.Mounts)
	}
	if st.TreeFds != 2 {
		t.Errorf("TreeFds %d, want 2 (the root and the mount)", st.TreeFds)
	}
	var ids []backing.ID
	for _, o := range st.Tree.Objects {
		ids = append(ids, o.ID)
		switch o.ID {
		case backing.RootID:
			if o.Refs != 1 || ino(tree(o.Fd)) != rootIno {
				t.Errorf("root %+v", o)
			}
		case 2:
			if !o.Superseded || o.Refs != math.MaxInt64 {
				t.Errorf("object 2, whose inode object 3 took over: %+v", o)
			}
		case 3:
			if o.Superseded || o.Refs != 5 {
				t.Errorf("object 3, whose slot holds 5 references: %+v", o)
			}
		}
	}
	if len(ids) != 3 || st.Tree.NextID != 5 {
		t.Errorf("objects %v, next ID %d; want 1, 2, 3 and 5", ids, st.Tree.NextID)
	}
	if len(st.Files) != 1 || st.Files[0].Fh != 1 || ino(fds[st.Files[0].Fd]) != fileIno || st.Files[0].Charged != "a" {
		t.Errorf("files %+v, want fh 1 alone, of its descriptor", st.Files)
	}
	if st.NextFile != 3 || st.NextDir != 1 {
		t.Errorf("next handles %d and %d, want 3 and 1", st.NextFile, st.NextDir)
	}
	if len(st.Dirs) != 1 || st.Dirs[0].Offset != 0 || ino(fds[st.Dirs[0].Fd]) != dirIno {
		t.Errorf("dirs %+v", st.Dirs)
	}
	if len(st.Nodes) != 1 || st.Nodes[0] != (NodeState{ID: 3, BackingID: 9}) {
		t.Errorf("nodes %+v", st.Nodes)
	}
	if len(st.LimitsOrder) != 1 || st.LimitsOrder[0] != "a" {
		t.Errorf("limits %v", st.LimitsOrder)
	}
	// A message that names a descriptor it did not bring is refused, and
	// those it brought are closed.
	extra := open(dir+"/f", unix.O_RDONLY)
	b, _ := json.Marshal(JournalMsg{Kind: jFile, File: &FileState{Fh: 5, ID: 3, Fd: 1}})
	if err := r.Apply(b, []int{extra}); err == nil {
		t.Error("a file of descriptor 1 of 1 was taken")
	}
	if _, err := unix.FcntlInt(uintptr(extra), unix.F_GETFD, 0); err == nil {
		t.Error("the descriptor of a message refused is still open")
	}
}

// FuzzRecord: a journal message of any bytes is applied or refused, never
// a panic, and a record that has not started gives no state.
func FuzzRecord(f *testing.F) {
	for _, m := range []JournalMsg{
		{Kind: jEnter, Object: &backing.LocalObject{ID: 2, Ino: 1, Handle: []byte{1}, Refs: 1, Fd: -1}},
		{Kind: jDrop, ID: 2},
		{Kind: jFile, File: &FileState{Fh: 1, ID: 2, Fd: 0}},
		{Kind: jClose, Fh: 1},
		{Kind: jDir, Dir: &DirState{Fh: 1, ID: 2, Fd: 0}},
		{Kind: jBacking, ID: 2, Backing: 3},
		{Kind: jGroups, Groups: &HandoverState{}},
		{Kind: jStart, Fuse: &fuse.Handoff{}, Tree: &backing.LocalState{}},
	} {
		b, _ := json.Marshal(m)
		f.Add(b)
		if b := encodeJournal(&m, false); b != nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"k":"start","fuse":{"Fd":3},"tree":{"mounts":[{"fd":-1}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewRecord()
		defer r.Close()
		r.Apply(b, nil)
		r.Apply(b, nil)
		if st, fds, err := r.State(); !r.Started() && (err == nil || st != nil || fds != nil) {
			t.Fatalf("a record not started gave a state: %v", err)
		}
	})
}

// BenchmarkJournalSend: what telling the supervisor of one change costs
// the serving process, each kind of message a request sends: an open
// file with its descriptor, a release, a new object.
func BenchmarkJournalSend(b *testing.B) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	j, err := NewJournal(pair[0], -1, -1, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	done := make(chan struct{})
	go func() { // the supervisor's end, closing what it is sent
		defer close(done)
		buf, oob := make([]byte, 1<<16), make([]byte, unix.CmsgSpace(4*253))
		for {
			n, oobn, _, _, err := unix.Recvmsg(pair[1], buf, oob, 0)
			if err != nil || n == 0 {
				return
			}
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				fds, _ := unix.ParseUnixRights(&m)
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
	}()
	defer func() { unix.Shutdown(pair[1], unix.SHUT_RD); <-done; unix.Close(pair[1]) }()
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	fs := FileState{Fh: 7, ID: 9, Opener: "tenants/a", Charged: "tenants/a",
		Cred: backing.Cred{Uid: 1000, Gid: 1000, Groups: []uint32{1000, 27}}}
	o := backing.LocalObject{ID: 5, Dev: 3, Ino: 77, Mode: syscall.S_IFREG, Handle: make([]byte, 8), MountID: 3, Refs: 1, Fd: -1}
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			j.send(&JournalMsg{Kind: jFile, File: &fs}, fd)
		}
	})
	b.Run("release", func(b *testing.B) {
		for b.Loop() {
			j.send(&JournalMsg{Kind: jClose, Fh: 7})
		}
	})
	b.Run("enter", func(b *testing.B) {
		for b.Loop() {
			j.send(&JournalMsg{Kind: jEnter, Object: &o})
		}
	})
}

// TestJournalEncoding: the changes sent in a few bytes decode to what was
// sent, with a handle or none and with a descriptor or none; cut short or
// of an unknown kind, they are refused.
func TestJournalEncoding(t *testing.T) {
	for _, c := range []struct {
		m  JournalMsg
		fd bool
	}{
		{JournalMsg{Kind: jEnter, Object: &backing.LocalObject{ID: 7, Dev: 1 << 40, Ino: 99, Mode: syscall.S_IFDIR, HType: -3, MountID: 12, Refs: 1, Slot: 1<<20 + 3, Handle: []byte{1, 2, 3}, Fd: -1}}, false},
		{JournalMsg{Kind: jEnter, Object: &backing.LocalObject{ID: 8, Ino: 5, Mode: syscall.S_IFREG, Refs: 2, Fd: 0}}, true},
		{JournalMsg{Kind: jDrop, ID: 1<<63 + 5}, false},
		{JournalMsg{Kind: jClose, Fh: 42}, false},
		{JournalMsg{Kind: jCloseDir, Fh: 43}, false},
		{JournalMsg{Kind: jBacking, ID: 9, Backing: -1}, false},
	} {
		b := encodeJournal(&c.m, c.fd)
		if b == nil || b[0] == '{' {
			t.Fatalf("%s: not encoded in bytes: %q", c.m.Kind, b)
		}
		got, err := decodeJournal(b)
		want, _ := json.Marshal(c.m)
		if g, _ := json.Marshal(got); err != nil || string(g) != string(want) {
			t.Errorf("%s: decoded %s, %v; want %s", c.m.Kind, g, err, want)
		}
		if _, err := decodeJournal(b[:len(b)-1]); err == nil {
			t.Errorf("%s: cut short by a byte, decoded", c.m.Kind)
		}
	}
	if encodeJournal(&JournalMsg{Kind: jFile, File: &FileState{}}, true) != nil {
		t.Error("an open file was encoded in bytes: its state goes as JSON")
	}
	if _, err := decodeJournal([]byte{'Z', 0, 0, 0, 0, 0, 0, 0, 0}); err == nil {
		t.Error("a message of an unknown kind decoded")
	}
}
