package backing

import (
	"sync/atomic"
	"unsafe"
)

// RefTable holds each object's reference count (the kernel's lookups) in
// memory another process can read after this one dies, such as a memfd a
// supervisor holds: a slot per object, written as the count changes and
// before the operation that changed it answers, so that what it holds is
// never below what the kernel holds. Slot 0 stands for none (the table
// full): such an object's count is not kept. Its methods are called under
// the tree's lock.
type RefTable struct {
	counts []uint64
	free   []int32
	next   int32
	used   map[int32]bool // while a tree is adopted
}

// NewRefTable makes a table of mem, 8 bytes a slot, aligned to 8 bytes;
// every slot is free.
func NewRefTable(mem []byte) *RefTable {
	n := len(mem) / 8
	var counts []uint64
	if n > 0 {
		counts = unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(mem))), n)
	}
	return &RefTable{counts: counts, next: 1}
}

// RefsAt is the count in slot of a table's memory mem, 0 when none is
// stored (read by a process that does not write it).
func RefsAt(mem []byte, slot int32) uint64 {
	if slot <= 0 || int(slot) >= len(mem)/8 {
		return 0
	}
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[int(slot)*8])))
}

// take returns a free slot, 0 when none is.
func (r *RefTable) take() int32 {
	if r == nil {
		return 0
	}
	if n := len(r.free); n > 0 {
		s := r.free[n-1]
		r.free = r.free[:n-1]
		return s
	}
	if int(r.next) >= len(r.counts) {
		return 0
	}
	r.next++
	return r.next - 1
}

// store writes slot's count.
func (r *RefTable) store(slot int32, n uint64) {
	if r != nil && slot > 0 && int(slot) < len(r.counts) {
		atomic.StoreUint64(&r.counts[slot], n)
	}
}

// put frees slot, its count zeroed.
func (r *RefTable) put(slot int32) {
	if r == nil || slot <= 0 || int(slot) >= len(r.counts) {
		return
	}
	atomic.StoreUint64(&r.counts[slot], 0)
	r.free = append(r.free, slot)
}

// adopt marks slot used by an object of a tree being adopted; settle
// frees the others once every object is adopted.
func (r *RefTable) adopt(slot int32) bool {
	if r == nil || slot <= 0 || int(slot) >= len(r.counts) || r.used[slot] {
		return false
	}
	if r.used == nil {
		r.used = map[int32]bool{}
	}
	r.used[slot] = true
	return true
}

// settle makes the slots not adopted free, the counts they held zeroed.
func (r *RefTable) settle() {
	if r == nil {
		return
	}
	var top int32 = 1
	for s := range r.used {
		top = max(top, s+1)
	}
	r.free, r.next = r.free[:0], top
	for s := top - 1; s >= 1; s-- {
		if !r.used[s] {
			atomic.StoreUint64(&r.counts[s], 0)
			r.free = append(r.free, s)
		}
	}
	r.used = nil
}
