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
//
// Weight is the group's share among its siblings when their parent is
// saturated, as io.weight: 1 to MaxWeight, 0 for DefaultWeight. Siblings
// share what their parent admits in proportion to their weights, by bytes
// (see Queue). A weight limits nothing alone.
type Limits struct {
	RBPS, WBPS, RIOPS, WIOPS int64
	Weight                   int64
}

// The range of weights, and a group's weight when none is set.
const (
	DefaultWeight = 100
	MaxWeight     = 10000
)

// weight returns l's weight, DefaultWeight when none is set.
func (l Limits) weight() int64 {
	if l.Weight == 0 {
		return DefaultWeight
	}
	return l.Weight
}

// Unlimited reports whether no field sets a limit (a weight is none).
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
	s := "rbps=" + f(l.RBPS) + " wbps=" + f(l.WBPS) + " riops=" + f(l.RIOPS) + " wiops=" + f(l.WIOPS)
	if l.Weight != 0 {
		s += " weight=" + strconv.FormatInt(l.Weight, 10)
	}
	return s
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
	if l.Weight < 0 || l.Weight > MaxWeight {
		return fmt.Errorf("throttle: weight=%d: want 1 to %d, or 0 for %d", l.Weight, MaxWeight, DefaultWeight)
	}
	return nil
}

// Keys is a set of a group's limit keys: which of rbps, wbps, riops, wiops
// and weight a LimitChange sets.
type Keys uint8

// The limit keys, each a bit of Keys.
const (
	KeyRBPS Keys = 1 << iota
	KeyWBPS
	KeyRIOPS
	KeyWIOPS
	KeyWeight
	// AllKeys is every key.
	AllKeys = KeyRBPS | KeyWBPS | KeyRIOPS | KeyWIOPS | KeyWeight
)

// LimitChange is a change of one group's limits: the keys in Keys take
// their values in To (0: max), the others keep the values they have. The
// zero LimitChange changes nothing. Values of keys not in Keys are
// ignored.
type LimitChange struct {
	Keys Keys
	To   Limits
}

// SetAll returns the change that sets every key to its value in l.
func SetAll(l Limits) LimitChange { return LimitChange{Keys: AllKeys, To: l} }

// Apply returns cur with the keys of c set to their values in c.To.
func (c LimitChange) Apply(cur Limits) Limits {
	if c.Keys&KeyRBPS != 0 {
		cur.RBPS = c.To.RBPS
	}
	if c.Keys&KeyWBPS != 0 {
		cur.WBPS = c.To.WBPS
	}
	if c.Keys&KeyRIOPS != 0 {
		cur.RIOPS = c.To.RIOPS
	}
	if c.Keys&KeyWIOPS != 0 {
		cur.WIOPS = c.To.WIOPS
	}
	if c.Keys&KeyWeight != 0 {
		cur.Weight = c.To.Weight
	}
	return cur
}
