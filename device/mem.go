package device

import (
	"io"
	"sync"
)

const memPage = 4096

// Mem is a file in memory. Bytes never written read as a pattern of their
// offset (Pattern), so only written pages take memory. It is safe for
// concurrent use.
type Mem struct {
	mu    sync.Mutex
	size  int64
	pages map[int64]*[memPage]byte
	syncs int
}

// NewMem returns a file of size bytes holding the pattern.
func NewMem(size int64) *Mem { return &Mem{size: size, pages: make(map[int64]*[memPage]byte)} }

// Pattern is the byte at off of a Mem that was never written there.
func Pattern(off int64) byte { return byte(off*7 + off/memPage) }

// Size returns the file's size.
func (m *Mem) Size() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.size
}

// Syncs returns how many times Sync was called.
func (m *Mem) Syncs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.syncs
}

func (m *Mem) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off >= m.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), m.size-off))
	for i := 0; i < n; {
		o := off + int64(i)
		idx, in := o/memPage, int(o%memPage)
		k := min(n-i, memPage-in)
		if pg := m.pages[idx]; pg != nil {
			copy(p[i:i+k], pg[in:in+k])
		} else {
			for j := range k {
				p[i+j] = Pattern(o + int64(j))
			}
		}
		i += k
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *Mem) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := 0; i < len(p); {
		o := off + int64(i)
		idx, in := o/memPage, int(o%memPage)
		k := min(len(p)-i, memPage-in)
		pg := m.pages[idx]
		if pg == nil {
			pg = new([memPage]byte)
			for j := range pg {
				pg[j] = Pattern(idx*memPage + int64(j))
			}
			m.pages[idx] = pg
		}
		copy(pg[in:in+k], p[i:i+k])
		i += k
	}
	m.size = max(m.size, off+int64(len(p)))
	return len(p), nil
}

func (m *Mem) Sync() error {
	m.mu.Lock()
	m.syncs++
	m.mu.Unlock()
	return nil
}
