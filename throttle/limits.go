package throttle

import (
	"fmt"
	"strconv"
)

// Dir is the direction of a request. Reads and writes are limited and
// queued independently.
type Dir uint8

const (
	Read Dir = iota
	Write
)

func (d Dir) String() string {
	switch d {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "Dir(" + strconv.Itoa(int(d)) + ")"
}

// Limits are a group's limits in cgroup v2 io.max vocabulary: bytes per
// second and I/Os per second, for reads and for writes. 0 means unlimited
// ("max"); negative values are invalid.
type Limits struct {
	RBPS, WBPS, RIOPS, WIOPS int64
}

// Unlimited reports whether no field sets a limit.
func (l Limits) Unlimited() bool {
	return l.RBPS == 0 && l.WBPS == 0 && l.RIOPS == 0 && l.WIOPS == 0
}

// BPS returns the bytes-per-second limit of direction d (0: unlimited).
func (l Limits) BPS(d Dir) int64 {
	if d == Write {
		return l.WBPS
	}
	return l.RBPS
}

// IOPS returns the I/Os-per-second limit of direction d (0: unlimited).
func (l Limits) IOPS(d Dir) int64 {
	if d == Write {
		return l.WIOPS
	}
	return l.RIOPS
}

// String formats l as io.max does: "rbps=10485760 wbps=max riops=max
// wiops=max".
func (l Limits) String() string {
	f := func(v int64) string {
		if v == 0 {
			return "max"
		}
		return strconv.FormatInt(v, 10)
	}
	return "rbps=" + f(l.RBPS) + " wbps=" + f(l.WBPS) + " riops=" + f(l.RIOPS) + " wiops=" + f(l.WIOPS)
}

// Validate returns an error naming the first negative field.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"rbps", l.RBPS}, {"wbps", l.WBPS}, {"riops", l.RIOPS}, {"wiops", l.WIOPS}} {
		if f.v < 0 {
			return fmt.Errorf("throttle: %s=%d: want 0 (max) or a positive rate", f.name, f.v)
		}
	}
	return nil
}
