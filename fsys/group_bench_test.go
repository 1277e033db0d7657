package fsys

import (
	"sync/atomic"
	"testing"

	"sluice/engine"
	"sluice/stack"
	"sluice/throttle"
)

// BenchmarkCallerGroup compares the two ways a request could find its
// caller's group: FS.group's map (the fsys cache) and the engine's lookup,
// which takes the engine's lock, alone and while other goroutines account
// unlimited I/O (Engine.Pass) under that lock as requests do.
func BenchmarkCallerGroup(b *testing.B) {
	eng, err := engine.New(engine.Options{Options: stack.DefaultOptions(), GoTimer: true})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	f := &FS{eng: eng, groups: make(map[string]*throttle.Group)}
	names := []string{"default", "tenants/a", "tenants/b", "batch"}
	for _, n := range names {
		f.group(n)
	}
	for _, load := range []bool{false, true} {
		for _, via := range []struct {
			name   string
			lookup func(string) *throttle.Group
		}{{"cache", f.group}, {"engine", eng.Group}} {
			name := via.name
			if load {
				name += "+io"
			}
			b.Run(name, func(b *testing.B) {
				var stop atomic.Bool
				done := make(chan struct{})
				if load {
					g := eng.Group("io")
					go func() {
						defer close(done)
						for !stop.Load() {
							eng.Pass(g, throttle.Read, 4096)
						}
					}()
				} else {
					close(done)
				}
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						via.lookup(names[i%len(names)])
						i++
					}
				})
				stop.Store(true)
				<-done
			})
		}
	}
}
