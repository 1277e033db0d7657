package engine

import (
	"syscall"
	"testing"
)

// shortFile returns at most chunk bytes per read from data, and, when
// direct, refuses reads at offsets that are not page-aligned (as O_DIRECT
// does).
type shortFile struct {
	data   []byte
	chunk  int
	direct bool
}

func (s *shortFile) ReadAt(p []byte, off int64) (int, error) {
	if s.direct && off%4096 != 0 {
		return 0, syscall.EINVAL
	}
	if off >= int64(len(s.data)) {
		return 0, nil
	}
	return copy(p[:min(len(p), s.chunk)], s.data[off:]), nil
}

// TestReadFullShortReads: a read short of a page in the middle of a file
// is continued, not taken for its end; on a file that refuses unaligned
// reads, a short read ends the read at the file's end only.
func TestReadFullShortReads(t *testing.T) {
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i)
	}
	for _, tc := range []struct {
		name string
		f    *shortFile
		size int
		want int
	}{
		{"buffered, 1000-byte reads", &shortFile{data: data, chunk: 1000}, 32 << 10, 32 << 10},
		{"buffered, to the end", &shortFile{data: data[:10000], chunk: 3000}, 32 << 10, 10000},
		{"direct, end mid-page", &shortFile{data: data[:10000], chunk: 1 << 20, direct: true}, 32 << 10, 10000},
		{"direct, whole pages", &shortFile{data: data, chunk: 8192, direct: true}, 32 << 10, 32 << 10},
	} {
		buf := make([]byte, tc.size)
		n, err := readFull(tc.f, buf, 0)
		if err != nil || n != tc.want {
			t.Errorf("%s: read %d bytes, %v; want %d", tc.name, n, err, tc.want)
			continue
		}
		for i := range n {
			if buf[i] != data[i] {
				t.Errorf("%s: byte %d differs", tc.name, i)
				break
			}
		}
	}
}
