package backing

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// Handing a Local tree over to another process (a takeover: the new
// process serves the same mount without unmounting it). The old process
// exports the tree while no operation is in progress; the new one adopts
// the state and the descriptors it names, then the open files and
// directories one by one. IDs keep naming the same objects, refs and the
// next ID carry over, and the new tree opens objects held by file handle
// on demand, as the old one did.
//
// Not carried: the ring of cached directory descriptors (the new tree
// opens them again from their handles as operations need them), the
// O_PATH descriptors of objects held by handle that open files and
// directories kept (AdoptFile and AdoptDir open them again from the
// descriptors handed over, not from the handle: a file deleted while open
// may no longer open by its handle), an open file's O_DIRECT descriptor
// (opened again at its first cold read), a directory's buffered entries
// (read again from its offset), and objects the kernel has forgotten
// while still in use (there are none while the mount is idle).

// Descriptors are those a handover sends another process, each a
// duplicate (close-on-exec) of one this process goes on using; a state
// names them by their index.
type Descriptors []int

// Dup appends a duplicate of fd and returns its index.
func (d *Descriptors) Dup(fd int) (int, error) {
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	*d = append(*d, n)
	return len(*d) - 1, nil
}

// Close closes them all.
func (d Descriptors) Close() {
	for _, fd := range d {
		unix.Close(fd)
	}
}

// LocalState is a Local tree's state as handed to another process
// (Local.Export, AdoptLocal): plain data, JSON-encodable. Descriptors are
// indexes into the list handed beside it.
type LocalState struct {
	// NextID is the ID the next new object gets: IDs are never reused.
	NextID ID `json:"next_id"`
	// Objects are every object the kernel holds, the root included, in
	// the order of their IDs.
	Objects []LocalObject `json:"objects"`
	// Mounts are the descriptors open_by_handle_at opens handles with.
	Mounts []LocalMount `json:"mounts,omitempty"`
	// NoHandles: the tree holds every object by descriptor (the process
	// that made it could not open file handles).
	NoHandles bool `json:"no_handles,omitempty"`
}

// LocalObject is one object of a LocalState.
type LocalObject struct {
	ID   ID     `json:"id"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	Mode uint32 `json:"mode"` // type bits
	// Handle is the object's file handle on mount MountID, of type
	// HType; nil for an object held by descriptor.
	Handle  []byte `json:"handle,omitempty"`
	HType   int32  `json:"htype,omitempty"`
	MountID int    `json:"mount_id,omitempty"`
	// Refs are the references the kernel holds (its lookups).
	Refs uint64 `json:"refs"`
	// Slot is the object's in the tree's RefTable, 0 for none.
	Slot int32 `json:"slot,omitempty"`
	// Fd is the index of the object's O_PATH descriptor, for an object
	// held by descriptor (Handle nil: the root, and every object of a
	// file system without handles); -1 for one held by handle.
	Fd int `json:"fd"`
	// Superseded: a lookup of Dev and Ino does not find this object (an
	// object entered later took its inode number over).
	Superseded bool `json:"superseded,omitempty"`
}

// LocalMount is a descriptor a LocalState's objects of mount MountID are
// opened from by handle; Fd is its index.
type LocalMount struct {
	MountID int `json:"mount_id"`
	Fd      int `json:"fd"`
}

// Export returns t's state and the descriptors it names, in order:
// duplicates (F_DUPFD_CLOEXEC) that the caller closes once sent. t is
// left as it was and goes on serving (a handover that fails leaves the
// mount with this process). The state is a snapshot: the caller stops
// the operations on t first (lookups and forgets made after it are not
// in it), and hands over the open files and directories itself (their
// descriptors, and Dir.Offset), for the new process's AdoptFile and
// AdoptDir.
func (t *Local) Export() (LocalState, []int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exportLocked()
}

// Journal exports t's state as Export does and, in the same instant,
// starts telling j of every object entered and dropped and every mount
// met from then on: the state and what j hears after it are the tree's
// objects at any instant.
func (t *Local) Journal(j LocalJournal) (LocalState, []int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, fds, err := t.exportLocked()
	if err == nil {
		t.journal = j
	}
	return st, fds, err
}

// SetJournal starts telling j of the tree's changes from now on, with no
// export: for a tree adopted from the state j's other end already holds.
// A nil j stops the telling.
func (t *Local) SetJournal(j LocalJournal) {
	t.mu.Lock()
	t.journal = j
	t.mu.Unlock()
}

// LocalJournal is told of a Local tree's changes as they happen (under
// the tree's lock, before the operation that made them answers), so that
// another process can hold a copy of its objects that a crash of this
// one leaves whole.
type LocalJournal interface {
	// Entered: a new object; fd is its O_PATH descriptor for an object
	// held by descriptor (o.Handle nil), to duplicate, else -1.
	Entered(o LocalObject, fd int)
	// Dropped: the kernel forgot the object.
	Dropped(id ID)
	// Mounted: a mount open_by_handle_at opens handles with, fd a
	// descriptor of it to duplicate.
	Mounted(mountID, fd int)
}

// object is in's LocalObject, its descriptor (Fd) left -1.
func (in *inode) object() LocalObject {
	o := LocalObject{ID: in.id, Dev: in.key.dev, Ino: in.key.ino, Mode: in.mode, Refs: in.refs, Slot: in.slot, Fd: -1}
	if in.handle != nil {
		o.Handle, o.HType, o.MountID = in.handle, in.htype, in.mountID
	}
	return o
}

func (t *Local) exportLocked() (LocalState, []int, error) {
	var fds Descriptors
	fail := func(err error) (LocalState, []int, error) {
		fds.Close()
		return LocalState{}, nil, err
	}
	dup := fds.Dup
	st := LocalState{NextID: t.nextID, NoHandles: t.noHandles, Objects: make([]LocalObject, 0, len(t.byID))}
	for _, id := range slices.Sorted(maps.Keys(t.byID)) {
		in := t.byID[id]
		o := LocalObject{ID: id, Dev: in.key.dev, Ino: in.key.ino, Mode: in.mode, Refs: in.refs, Slot: in.slot, Fd: -1,
			Superseded: t.byKey[in.key] != in}
		if in.handle != nil {
			o.Handle, o.HType, o.MountID = bytes.Clone(in.handle), in.htype, in.mountID
		} else {
			if in.fd < 0 {
				return fail(fmt.Errorf("object %d has no descriptor: the tree is closed", id))
			}
			var err error
			if o.Fd, err = dup(in.fd); err != nil {
				return fail(fmt.Errorf("object %d: %w", id, err))
			}
		}
		st.Objects = append(st.Objects, o)
	}
	for _, mountID := range slices.Sorted(maps.Keys(t.mounts)) {
		i, err := dup(t.mounts[mountID])
		if err != nil {
			return fail(fmt.Errorf("mount %d: %w", mountID, err))
		}
		st.Mounts = append(st.Mounts, LocalMount{MountID: mountID, Fd: i})
	}
	return st, fds, nil
}

// AdoptLocal makes a Local tree of the state another process exported
// (Local.Export): the IDs name the same objects, with the same
// references, and new objects get IDs from st.NextID on. It takes fds
// over, the descriptors st names (this process's numbers, in the order
// Export returned them), and closes those it does not keep, on success
// and on error. Like NewLocal it sets the process's umask to 0. It fails
// when a descriptor is not of the object or mount st says, or when this
// process cannot open the file handles st holds objects by (it lacks
// CAP_DAC_READ_SEARCH).
func AdoptLocal(st LocalState, fds []int, opts LocalOptions) (*Local, error) {
	unix.Umask(0)
	if opts.MaxOpen <= 0 {
		opts.MaxOpen = 1024
	}
	t := &Local{
		opts:      opts,
		byID:      make(map[ID]*inode, len(st.Objects)),
		byKey:     make(map[devIno]*inode, len(st.Objects)),
		nextID:    st.NextID,
		mounts:    make(map[int]int, len(st.Mounts)),
		noHandles: st.NoHandles,
	}
	t.lru.prev, t.lru.next = &t.lru, &t.lru
	kept := make([]bool, len(fds))
	fail := func(err error) (*Local, error) {
		t.Close() // the descriptors kept so far
		for i, fd := range fds {
			if !kept[i] && fd >= 0 {
				unix.Close(fd)
			}
		}
		return nil, fmt.Errorf("adopting the tree handed over: %w", err)
	}
	// take marks descriptor i kept; the caller stores it in t at once, for
	// fail to close.
	take := func(i int) (int, error) {
		switch {
		case i < 0 || i >= len(fds) || fds[i] < 0:
			return -1, fmt.Errorf("no descriptor %d (of %d)", i, len(fds))
		case kept[i]:
			return -1, fmt.Errorf("descriptor %d named twice", i)
		}
		kept[i] = true
		return fds[i], nil
	}
	for _, m := range st.Mounts {
		if _, ok := t.mounts[m.MountID]; ok {
			return fail(fmt.Errorf("mount %d named twice", m.MountID))
		}
		fd, err := take(m.Fd)
		if err != nil {
			return fail(fmt.Errorf("mount %d: %w", m.MountID, err))
		}
		t.mounts[m.MountID] = fd
		if err := probeMount(fd, m.MountID); err != nil {
			return fail(err)
		}
	}
	for _, o := range st.Objects {
		if o.ID < RootID || o.ID >= st.NextID {
			return fail(fmt.Errorf("object %d: not below the next ID %d", o.ID, st.NextID))
		}
		if t.byID[o.ID] != nil {
			return fail(fmt.Errorf("object %d named twice", o.ID))
		}
		in := &inode{id: o.ID, key: devIno{o.Dev, o.Ino}, mode: o.Mode & syscall.S_IFMT, fd: -1, refs: o.Refs}
		if opts.Refs.adopt(o.Slot) {
			in.slot = o.Slot
			opts.Refs.store(in.slot, in.refs)
		}
		if o.Handle == nil {
			fd, err := take(o.Fd)
			if err != nil {
				return fail(fmt.Errorf("object %d: %w", o.ID, err))
			}
			in.fd = fd
			t.byID[in.id] = in
			if err := checkObject(fd, in); err != nil {
				return fail(fmt.Errorf("object %d: %w", o.ID, err))
			}
			if in.id == RootID {
				in.uses = 1 // never released, as NewLocal holds it
			} else {
				t.pinned++
			}
		} else {
			switch {
			case o.ID == RootID:
				return fail(errors.New("the root is held by a handle, not by its descriptor"))
			case o.Fd != -1:
				return fail(fmt.Errorf("object %d has both a handle and a descriptor", o.ID))
			case st.NoHandles:
				return fail(fmt.Errorf("object %d has a handle in a tree without handles", o.ID))
			}
			if _, ok := t.mounts[o.MountID]; !ok {
				return fail(fmt.Errorf("object %d: no descriptor of its mount %d", o.ID, o.MountID))
			}
			in.handle, in.htype, in.mountID = bytes.Clone(o.Handle), o.HType, o.MountID
			t.byID[in.id] = in
		}
		if !o.Superseded {
			if other := t.byKey[in.key]; other != nil {
				return fail(fmt.Errorf("objects %d and %d both found by device %d inode %d", other.id, in.id, o.Dev, o.Ino))
			}
			t.byKey[in.key] = in
		}
	}
	if root := t.byID[RootID]; root == nil || root.mode != syscall.S_IFDIR {
		return fail(errors.New("no root directory"))
	}
	for i, fd := range fds {
		if !kept[i] && fd >= 0 {
			unix.Close(fd)
		}
	}
	opts.Refs.settle() // the slots no object took are free
	t.creds = newCreds()
	return t, nil
}

// probeMount checks that fd is a descriptor of mount mountID, and that
// this process can open file handles with it.
func probeMount(fd, mountID int) error {
	fh, got, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("mount %d: %w", mountID, err)
	}
	if got != mountID {
		return fmt.Errorf("the descriptor of mount %d is on mount %d", mountID, got)
	}
	pfd, err := unix.OpenByHandleAt(fd, fh, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return fmt.Errorf("mount %d: this process cannot open file handles (%w): it needs CAP_DAC_READ_SEARCH, as the one that handed the tree over had", mountID, err)
	}
	unix.Close(pfd)
	return nil
}

// checkObject checks that fd is a descriptor of the object in names.
func checkObject(fd int, in *inode) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	if k := (devIno{st.Dev, st.Ino}); k != in.key || st.Mode&syscall.S_IFMT != in.mode {
		return fmt.Errorf("the descriptor is of device %d inode %d type %#o, not of device %d inode %d type %#o",
			k.dev, k.ino, st.Mode&syscall.S_IFMT, in.key.dev, in.key.ino, in.mode)
	}
	return nil
}

// adopt holds object id, which fd (an open file or directory of it) is
// of, as acquire does; dir: it must be a directory. An object held by
// handle whose descriptor is closed gets one opened from fd: a file
// deleted while open may no longer open by its handle.
func (t *Local) adopt(id ID, fd int, dir bool) (*inode, error) {
	if fd < 0 {
		return nil, fmt.Errorf("object %d: %w", id, syscall.EBADF)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.byID[id]
	if in == nil || in.fd < 0 && in.handle == nil {
		return nil, fmt.Errorf("object %d: %w", id, syscall.ESTALE)
	}
	if dir && in.mode != syscall.S_IFDIR {
		return nil, fmt.Errorf("object %d: %w", id, syscall.ENOTDIR)
	}
	if err := checkObject(fd, in); err != nil {
		return nil, fmt.Errorf("object %d: %w", id, err)
	}
	if in.fd < 0 {
		pfd, err := unix.Open(procPath(fd), unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", id, err)
		}
		in.fd = pfd
		t.cached++
	} else if in.next != nil {
		t.unlink(in)
	}
	in.uses++
	return in, nil
}

// AdoptFile makes an open file of object id again from fd, its
// descriptor handed over from another process (File.Fd there). The file
// holds the object as one Open returns does until Close. It takes fd
// over: on error it closes it.
func (t *Local) AdoptFile(id ID, fd int) (*File, error) {
	in, err := t.adopt(id, fd, false)
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, err
	}
	return &File{fd: fd, release: func() { t.release(in) }, faults: t.opts.Faults}, nil
}

// AdoptDir makes an open directory of object id again from fd, its
// descriptor handed over from another process (Dir.Fd there), to continue
// the listing from off (Dir.Offset there). The stream shares its position
// with the other process's: it is moved to off at the first read, not
// before, so that the other process's directory reads on as it was if the
// handover fails. The directory holds the object as one OpenDir returns
// does until Close. It takes fd over: on error it closes it.
func (t *Local) AdoptDir(id ID, fd int, off uint64) (*Dir, error) {
	in, err := t.adopt(id, fd, true)
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, err
	}
	return &Dir{fd: fd, next: off, reseek: true, release: func() { t.release(in) }}, nil
}
