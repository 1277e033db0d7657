package mirror

import "testing"

// BenchmarkRead: what each policy costs one device read of a mirror set
// of two, picked, started and done 100 us later, four reads in flight:
// the policy's own share of every mirrored read, in the mount and in the
// simulator alike.
func BenchmarkRead(b *testing.B) {
	for _, name := range []string{"pid", "roundrobin", "latency", "adaptive"} {
		b.Run(name, func(b *testing.B) {
			p, err := New(name, 2)
			if err != nil {
				b.Fatal(err)
			}
			type flight struct {
				m     int
				start int64
			}
			var ring [4]flight
			now := int64(0)
			for i := range ring {
				r := Read{PID: i, Off: int64(i) << 16, Len: 64 << 10}
				m := p.Pick(now, r)
				p.Started(now, m, r)
				ring[i] = flight{m, now}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				now += 25_000
				f := &ring[i%len(ring)]
				p.Done(now, f.m, f.start, nil)
				r := Read{PID: i % 4, Off: int64(i) << 16, Len: 64 << 10}
				m := p.Pick(now, r)
				p.Started(now, m, r)
				*f = flight{m, now}
				i++
			}
		})
	}
}
