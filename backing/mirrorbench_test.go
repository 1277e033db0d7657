package backing

import (
	"bytes"
	"sync/atomic"
	"testing"
)

// BenchmarkMirrorRead: what one 4 KiB read of a mirror set of two costs
// under each read policy, two readers a CPU at once, from files in the
// page cache: the set's own share of every mirrored read (lock, policy, the
// hedge watch under adaptive), the pread itself included. Reads go the
// way the mount sends them, tagged for an early answer.
func BenchmarkMirrorRead(b *testing.B) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	for _, policy := range []string{"pid", "roundrobin", "latency", "adaptive"} {
		b.Run(policy, func(b *testing.B) {
			m, f := mirrorPair(b, MirrorOptions{Policy: policy}, content)
			m.SetAnswer(func(uint64, []byte) error { return nil })
			var unique atomic.Uint64
			b.SetParallelism(2)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				p := make([]byte, 4096)
				i := int64(0)
				for pb.Next() {
					off := (i * 4096 * 61) % int64(len(content))
					if _, _, err := f.ReadAtAnswering(int(i&3), unique.Add(1), p, off); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}
