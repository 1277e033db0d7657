package throttle

import (
	"fmt"
	"strconv"
	"time"
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
//
// The floors RBPSMin, WBPSMin, RIOPSMin and WIOPSMin (0: none) are what
// the group gets of its parent, when it asks for it, before its siblings
// share the rest by weight (see Queue): a floor is served first, never
// past the group's own caps, and only out of what its parent admits.
//
// Target is a latency target in ns (0: none), as io.latency's: where the
// groups share the device (Tree.Shared), a group whose device I/Os take
// longer than Target, more than one in ten, makes the device's capacity
// shrink until they do not, holding back the groups that queue the most
// (see package cost). It limits nothing alone.
type Limits struct {
	RBPS, WBPS, RIOPS, WIOPS             int64
	Weight                               int64
	RBPSMin, WBPSMin, RIOPSMin, WIOPSMin int64
	Target                               int64
}

// Lease is what a group may use of its caps on this host where other
// hosts share them (package lease): per cap key, the rate it is held to
// here, never above the cap; 0 where the key is not leased. A lease of
// nothing at all is 1 (a byte or an I/O a second).
//
// Dev is the device time, in ns a second as Request.Cost counts it, the
// group may take here where the hosts share SOURCE's device by weight
// (0: no such lease); it holds the group as the device's capacity holds
// the root, and only where the Tree is Shared.
type Lease struct {
	RBPS, WBPS, RIOPS, WIOPS int64
	Dev                      int64
}

// minBPS and minIOPS return the floors of direction d (0: none).
func (l Limits) minBPS(d Dir) int64  { return byDir(d, l.RBPSMin, l.WBPSMin) }
func (l Limits) minIOPS(d Dir) int64 { return byDir(d, l.RIOPSMin, l.WIOPSMin) }

// hasFloor reports whether l sets a floor.
func (l Limits) hasFloor() bool {
	return l.RBPSMin != 0 || l.WBPSMin != 0 || l.RIOPSMin != 0 || l.WIOPSMin != 0
}

// byDir returns r for reads and w for writes.
func byDir(d Dir, r, w int64) int64 {
	if d == Write {
		return w
	}
	return r
}

// The range of weights, and a group's weight when none is set.
const (
	DefaultWeight = 100
	MaxWeight     = 10000
)

// WeightOrDefault returns l's weight, DefaultWeight when none is set.
func (l Limits) WeightOrDefault() int64 {
	if l.Weight == 0 {
		return DefaultWeight
	}
	return l.Weight
}

// Unlimited reports whether no field sets a limit (a weight is none).
func (l Limits) Unlimited() bool {
	return l.RBPS == 0 && l.WBPS == 0 && l.RIOPS == 0 && l.WIOPS == 0
}

// Shares reports whether l sets a weight, a floor or a latency target:
// what shares a parent, or the device, rather than capping.
func (l Limits) Shares() bool { return l.Weight != 0 || l.hasFloor() || l.Target != 0 }

// BPS returns the bytes-per-second limit of direction d (0: unlimited).
func (l Limits) BPS(d Dir) int64 { return byDir(d, l.RBPS, l.WBPS) }

// IOPS returns the I/Os-per-second limit of direction d (0: unlimited).
func (l Limits) IOPS(d Dir) int64 { return byDir(d, l.RIOPS, l.WIOPS) }

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
	for _, f := range l.floors() {
		if f.v != 0 {
			s += " " + f.name + "=" + strconv.FormatInt(f.v, 10)
		}
	}
	if l.Target != 0 {
		s += " target=" + time.Duration(l.Target).String()
	}
	return s
}

// Field is one key of Limits: its name, as --limit writes it, its bit in
// Keys, and where its value is.
type Field struct {
	Name string
	Key  Keys
	At   func(*Limits) *int64
}

// Fields lists every key of Limits in canonical order: the caps (the
// first four), the weight, the floors (the next four, in the caps'
// order) and the latency target.
var Fields = []Field{
	{"rbps", KeyRBPS, func(l *Limits) *int64 { return &l.RBPS }},
	{"wbps", KeyWBPS, func(l *Limits) *int64 { return &l.WBPS }},
	{"riops", KeyRIOPS, func(l *Limits) *int64 { return &l.RIOPS }},
	{"wiops", KeyWIOPS, func(l *Limits) *int64 { return &l.WIOPS }},
	{"weight", KeyWeight, func(l *Limits) *int64 { return &l.Weight }},
	{"rbps.min", KeyRBPSMin, func(l *Limits) *int64 { return &l.RBPSMin }},
	{"wbps.min", KeyWBPSMin, func(l *Limits) *int64 { return &l.WBPSMin }},
	{"riops.min", KeyRIOPSMin, func(l *Limits) *int64 { return &l.RIOPSMin }},
	{"wiops.min", KeyWIOPSMin, func(l *Limits) *int64 { return &l.WIOPSMin }},
	{"target", KeyTarget, func(l *Limits) *int64 { return &l.Target }},
}

type field struct {
	name string
	v    int64
}

// caps and floors list l's caps and floors, named, in the same order.
func (l Limits) caps() []field   { return l.values(Fields[:4]) }
func (l Limits) floors() []field { return l.values(Fields[5:9]) }

func (l Limits) values(fs []Field) []field {
	out := make([]field, len(fs))
	for i, f := range fs {
		out[i] = field{f.Name, *f.At(&l)}
	}
	return out
}

// Validate returns an error naming the first negative field, a weight out
// of its range, or a floor above the cap of the same key.
func (l Limits) Validate() error {
	caps, floors := l.caps(), l.floors()
	for i, f := range append(caps, floors...) {
		if f.v < 0 {
			return fmt.Errorf("throttle: %s=%d: want 0 (max) or a positive rate", f.name, f.v)
		}
		if i >= len(caps) && caps[i-len(caps)].v != 0 && f.v > caps[i-len(caps)].v {
			c := caps[i-len(caps)]
			return fmt.Errorf("throttle: %s=%d is above %s=%d: a floor may not exceed the cap", f.name, f.v, c.name, c.v)
		}
	}
	if l.Target < 0 {
		return fmt.Errorf("throttle: target=%d: want 0 (none) or a positive duration in ns", l.Target)
	}
	if l.Weight < 0 || l.Weight > MaxWeight {
		return fmt.Errorf("throttle: weight=%d: want 1 to %d, or 0 for %d", l.Weight, MaxWeight, DefaultWeight)
	}
	return nil
}

// Keys is a set of a group's limit keys: which of rbps, wbps, riops, wiops,
// weight and the floors a LimitChange sets.
type Keys uint16

// The limit keys, each a bit of Keys.
const (
	KeyRBPS Keys = 1 << iota
	KeyWBPS
	KeyRIOPS
	KeyWIOPS
	KeyWeight
	KeyRBPSMin
	KeyWBPSMin
	KeyRIOPSMin
	KeyWIOPSMin
	KeyTarget
	// AllKeys is every key.
	AllKeys = KeyRBPS | KeyWBPS | KeyRIOPS | KeyWIOPS | KeyWeight | KeyRBPSMin | KeyWBPSMin | KeyRIOPSMin | KeyWIOPSMin | KeyTarget
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
	for _, f := range Fields {
		if c.Keys&f.Key != 0 {
			*f.At(&cur) = *f.At(&c.To)
		}
	}
	return cur
}
