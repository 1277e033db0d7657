package lease

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Shares of a device. Where the hosts' mounts share one SOURCE's device
// by weight (groups with a weight, a floor or a latency target and no cap
// above them), each host alone would split only its own part of it: a
// tenant of weight 200 on one host and one of weight 100 on three others
// would meet at the device, which splits by queue depth, 1 to 3. So each
// host tells the others, through the same script, every top-level group's
// weight, device time used a second (in reference I/Os, ShareUse) and the
// share of the time it was busy (requests queued or in the device); from
// every host's figures each host computes the same division of the device
// (Allot), and leases its groups' parts as caps of device time (the key
// DevKey), which package lease divides among the group's hosts like any
// other cap. While a host's groups hold such leases, its own capacity is
// not in force (throttle.Tree.SetCapacity): the leases are the capacity.
//
// The division is weighted max-min fairness over the device time the
// groups used together. A group busy nearly all the time (ShareBusy)
// wants its whole weighted share where the device is saturated (a host
// found it so in its last period), or it used most of its last part
// (shareUsed): it is held by the device or by its lease, not by its own
// pace. Any other group wants what it uses and a sixteenth (where none
// wants more, each gets that). Where no host found the device saturated
// in its last period, the total divided is what was used and a twentieth
// (shareGrowth): the groups held back grow until the device saturates
// again. The device is divided from when a host finds it saturated (its
// capacity controller holds it at a capacity, or a period's completions
// queued: cost.State.Queued; DeviceUse) until none has for ShareHold,
// while two groups or more use it.

// DevKey is the cap key of a lease of device time: millionths of a
// reference I/O a second (see ShareUse.Units).
const DevKey = "dev"

// shareGrowth is what the groups' use together is multiplied by to divide
// where no host found the device saturated in its last period: a group
// held back by its lease grows by as much in a Renew, until the device
// saturates.
const shareGrowth = 1.05

// ShareBusy is the share of the time a group must be busy to want its
// whole weighted share of the device.
const ShareBusy = 0.9

// shareUsed is the share of its last part a busy group must have used to
// want its whole weighted share where the device is not saturated.
const shareUsed = 0.85

// ShareHold is how long the device stays divided after the last host
// whose capacity controller held it at a capacity let go: held at the
// parts' sum, the device is seldom found saturated, and the controllers
// let go after a second (cost.Options.Calm).
const ShareHold = 3 * time.Second

// ShareUse is one top-level group's running totals on a shared device,
// as the host's engine counts them.
type ShareUse struct {
	Group  string
	Weight int64
	// Units is the device time charged to it, in millionths of a
	// reference I/O (a 4 KiB random read, as the host's cost model prices
	// it: hosts that see one device differently count alike), BusyNs the
	// time it had requests queued or in the device, in ns; both since a
	// fixed time.
	Units, BusyNs int64
}

// DeviceUse is the device's state on this host.
type DeviceUse struct {
	// Capacity says the host found the device saturated lately (its
	// capacity controller holds it at a capacity) or now; Saturated that
	// its last period found it saturated or its completions queued.
	Capacity, Saturated bool
}

// shareGroup is one group's figures as a host publishes them.
type shareGroup struct {
	group  string
	weight int64
	use    int64   // millionths of a reference I/O a second
	busy   float64 // the share of the time it was busy
}

// HostShare is one host's figures on the shared device, as the server
// returns them.
type HostShare struct {
	Host                string
	Capacity, Saturated bool
	groups              []shareGroup
}

// shareState is a group's totals when last measured.
type shareState struct {
	at, dev, busy int64
	use           int64
	busyFrac      float64
	measured      bool
}

// SetShares takes at now the device's state and every top-level group's
// totals on it, for the next Request to publish; nil groups publish
// nothing (the device is not shared here). A group's rates are measured
// over at least half a Renew.
func (h *Host) SetShares(now int64, d DeviceUse, groups []ShareUse) {
	if len(groups) == 0 {
		h.shares, h.blob = nil, ""
		return
	}
	if h.shares == nil {
		h.shares = map[string]*shareState{}
	}
	var b strings.Builder
	keep := map[string]bool{}
	for _, g := range groups {
		if strings.ContainsAny(g.Group, "\t\n") {
			continue
		}
		keep[g.Group] = true
		s := h.shares[g.Group]
		if s == nil {
			s = &shareState{at: now, dev: g.Units, busy: g.BusyNs}
			h.shares[g.Group] = s
		}
		if dt := now - s.at; dt >= int64(h.opts.Renew)/2 {
			// Halfway to each new measure: a Renew sees a few dozen I/Os
			// of a group at most on a slow device, a tenth more or less.
			// A group that did nothing has stopped, at once.
			use, busy := perSec(g.Units-s.dev, dt), min(float64(g.BusyNs-s.busy)/float64(dt), 1)
			if s.measured && (use > 0 || busy > 0) {
				use, busy = (use+s.use)/2, (busy+s.busyFrac)/2
			}
			s.use, s.busyFrac, s.measured = use, busy, true
			s.at, s.dev, s.busy = now, g.Units, g.BusyNs
		}
		b.WriteString("\n" + strconv.FormatInt(g.Weight, 10) + "\t" + strconv.FormatInt(s.use, 10) + "\t" +
			strconv.FormatFloat(s.busyFrac, 'f', 3, 64) + "\t" + g.Group)
	}
	active := false
	for k, x := range h.shares {
		if !keep[k] {
			delete(h.shares, k)
		}
		active = active || x.use > 0 || x.busyFrac > 0
	}
	// A host whose groups have stopped says nothing of the device: its
	// controller's last period is as old as its last I/O.
	h.blob = strconv.FormatBool(d.Capacity && active) + " " + strconv.FormatBool(d.Saturated && active) + b.String()
}

// parseShare reads a host's published figures; ok is false where they
// are not what SetShares writes.
func parseShare(host, blob string) (HostShare, bool) {
	lines := strings.Split(blob, "\n")
	var s HostShare
	s.Host = host
	head := strings.Fields(lines[0])
	if len(head) != 2 {
		return s, false
	}
	s.Capacity, s.Saturated = head[0] == "true", head[1] == "true"
	for _, l := range lines[1:] {
		f := strings.SplitN(l, "\t", 4)
		if len(f) != 4 {
			return s, false
		}
		w, err1 := strconv.ParseInt(f[0], 10, 64)
		u, err2 := strconv.ParseInt(f[1], 10, 64)
		b, err3 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil || err3 != nil || w <= 0 || u < 0 {
			return s, false
		}
		s.groups = append(s.groups, shareGroup{group: f[3], weight: w, use: u, busy: b})
	}
	return s, true
}

// Allot divides the device among the groups of every host's figures in
// pool (see the package's Shares of a device), held saying it is to be
// divided at all and last the division before: the device time a second
// each group may take, summed over its hosts, in millionths of a
// reference I/O; nil where it is not to be divided.
func Allot(pool []HostShare, held bool, last map[string]int64) map[string]int64 {
	saturated := false
	type agg struct {
		weight int64
		use    float64
		busy   float64
	}
	groups := map[string]*agg{}
	var names []string
	var total float64
	for _, h := range pool {
		saturated = saturated || h.Saturated
		for _, g := range h.groups {
			a := groups[g.group]
			if a == nil {
				a = &agg{}
				groups[g.group] = a
				names = append(names, g.group)
			}
			a.weight = max(a.weight, g.weight)
			a.use += float64(g.use)
			a.busy = max(a.busy, g.busy)
			total += float64(g.use)
		}
	}
	wants := func(n string) bool {
		a := groups[n]
		if a.busy < ShareBusy {
			return false
		}
		prev, ok := last[n]
		return saturated || !ok || a.use >= shareUsed*float64(prev)
	}
	using := 0
	for _, n := range names {
		if groups[n].use > 0 {
			using++
		}
	}
	if !held || using < 2 {
		return nil // one group alone takes what it can
	}
	if !saturated {
		total *= shareGrowth
	}
	slices.Sort(names)
	demand := func(n string) float64 {
		if wants(n) {
			return math.Inf(1)
		}
		return groups[n].use + groups[n].use/16
	}
	// Weighted water-filling: by demand over weight, the smallest met
	// first; from the first that wants more than its weighted part of
	// what is left, each takes its weighted part (one that wants all it
	// can get is among them: the loop ends there).
	order := slices.Clone(names)
	slices.SortFunc(order, func(x, y string) int {
		return cmp.Compare(demand(x)/float64(groups[x].weight), demand(y)/float64(groups[y].weight))
	})
	// Where no group wants more than it uses, each gets that: the total
	// is never less than they need.
	var paced float64
	for _, n := range names {
		if d := demand(n); !math.IsInf(d, 1) {
			paced += d
		}
	}
	total = max(total, paced)
	out := make(map[string]int64, len(names))
	left := total
	var weights float64
	for _, n := range order {
		weights += float64(groups[n].weight)
	}
	for i, n := range order {
		a := groups[n]
		if d := demand(n); d <= left*float64(a.weight)/weights {
			out[n] = int64(d)
			left -= d
			weights -= float64(a.weight)
			continue
		}
		for _, m := range order[i:] {
			out[m] = int64(left * float64(groups[m].weight) / weights)
		}
		break
	}
	return out
}

// Allots returns the division of the device by the figures of the last
// answer (Allot), or nil where it is older than a Lease, or none came.
func (h *Host) Allots(now int64) map[string]int64 {
	if !h.answered || now-h.stats.LastAnswer > int64(h.opts.Lease) {
		return nil
	}
	return h.allots
}

// Pool returns every host's figures on the shared device as the last
// answer gave them.
func (h *Host) Pool() []HostShare { return h.pool }

// Uses reports whether one of the host's groups used the device.
func (s HostShare) Uses() bool {
	for _, g := range s.groups {
		if g.use > 0 {
			return true
		}
	}
	return false
}

// ShareActive reports whether the group used the device here, or was
// busy on it, in the last measure of SetShares.
func (h *Host) ShareActive(group string) bool {
	s := h.shares[group]
	return s != nil && (s.use > 0 || s.busyFrac > 0)
}
