// Package cluster shares the caps of a mount's groups with the mounts of
// other hosts, through a Redis server: every mount of one cluster name
// holds each group's cap (rbps, wbps, riops, wiops) summed over them all.
// It drives package lease, whose logic it holds no part of: every
// Options.Lease.Renew (and earlier where a group's demand changes) it
// sends the host's use to the server, off the I/O path, and holds each
// group to what it was granted. No read or write ever waits on Redis: a
// group waits only for its throttle, at the rate its lease sets.
package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/lease"
	"sluice/stack"
	"sluice/throttle"
)

// Engine is what the cluster needs of the mount's engine.
type Engine interface {
	// Capped returns the figures of every group with a cap of its own.
	Capped() []stack.GroupMetrics
	// SetLease holds a group's caps on this host.
	SetLease(path string, l throttle.Lease)
	// NotifyQueued has the engine send ch a token when a request may
	// have begun to wait (engine.Engine.NotifyQueued).
	NotifyQueued(ch chan<- struct{})
	// Sharing returns the device's state and its top-level groups'
	// totals, where groups share it by weight.
	Sharing() stack.Sharing
	// SetElsewhere says whether other hosts' groups use the device.
	SetElsewhere(v bool)
}

// Options configure a Cluster.
type Options struct {
	// URL is the Redis server's: redis://[USER:PASSWORD@]HOST:PORT[/DB],
	// rediss:// for TLS, or unix:///PATH.
	URL string
	// Name is the cluster's: the mounts of one name share their groups'
	// caps, group by group path.
	Name string
	// Host is this mount's name among them, unique in the cluster.
	Host string
	// CA is a PEM file of the certificate authorities the server's
	// certificate must be signed by, for a rediss:// URL; "" for the
	// system's.
	CA string
	// Lease sets the leases' timing; zero fields take lease's defaults.
	Lease lease.Options
	// Log reports the server lost and found again; nil for none.
	Log func(format string, args ...any)
}

// Cluster is a mount's membership of a cluster.
type Cluster struct {
	opts    Options
	rdb     *redis.Client
	script  *redis.Script
	release *redis.Script
	eng     Engine
	epoch   time.Time

	mu     sync.Mutex
	h      *lease.Host
	leased map[string]throttle.Lease // the leases set, by group
	lost   bool                      // holding fallbacks, logged
	// elsewhere says the engine was told other hosts use the device.
	elsewhere bool
	// unitNs is the device time of a reference I/O by the host's model.
	unitNs  atomic.Int64
	lastErr error
	started int64

	results chan result
	queued  chan struct{}
	quit    chan struct{}
	done    chan struct{}
}

type result struct {
	at    int64
	reply lease.Reply
	err   error
}

// Redacted returns u with any password replaced by "xxxxx".
func Redacted(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Redacted()
}

// ParseURL reads a Redis URL, or says what it wants instead.
func ParseURL(u string) (*redis.Options, error) {
	ro, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("%q: %v: want redis://[USER:PASSWORD@]HOST:PORT[/DB], rediss:// for TLS, or unix:///PATH", Redacted(u), err)
	}
	return ro, nil
}

// LoadCA reads a PEM file of certificate authorities.
func LoadCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, nil
}

// Join connects to the server, takes this host's first leases and holds
// the engine's groups to them, then keeps them up to date until Close.
// It fails where the URL is not one, or the server cannot be reached or
// refuses (a wrong password): a mount must not start with caps it cannot
// share.
func Join(ctx context.Context, eng Engine, o Options) (*Cluster, error) {
	ro, err := ParseURL(o.URL)
	if err != nil {
		return nil, err
	}
	if o.Name == "" {
		return nil, errors.New("no cluster name")
	}
	if o.CA != "" {
		if ro.TLSConfig == nil {
			return nil, fmt.Errorf("%s: a certificate authority for a server without TLS: want rediss://", Redacted(o.URL))
		}
		if ro.TLSConfig.RootCAs, err = LoadCA(o.CA); err != nil {
			return nil, err
		}
	}
	// go-redis logs each failed dial on its own; the cluster reports the
	// same failures once, as they change, through Options.Log.
	quietOnce.Do(func() { redis.SetLogger(quiet{}) })
	h := lease.NewHost(o.Lease)
	lo := h.Options()
	ro.MaxRetries = -1
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = lo.Timeout, lo.Timeout, lo.Timeout
	ro.PoolSize = 4
	c := &Cluster{opts: o, rdb: redis.NewClient(ro), script: redis.NewScript(lease.Script),
		release: redis.NewScript(lease.ReleaseScript), eng: eng, epoch: time.Now(), h: h,
		leased: map[string]throttle.Lease{}, results: make(chan result, 1), queued: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	if c.opts.Log == nil {
		c.opts.Log = func(string, ...any) {}
	}
	// The first leases before any I/O: with the mount's first requests
	// served at the whole cap, every host starting at once would add up.
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.rdb.Ping(fctx).Err(); err != nil {
		c.rdb.Close()
		return nil, fmt.Errorf("%s: %v", Redacted(o.URL), err)
	}
	now := c.now()
	c.started = now
	req := h.Request(now, c.usage(now))
	r, err := c.send(fctx, req)
	if err != nil {
		c.rdb.Close()
		return nil, fmt.Errorf("%s: the first lease: %v", Redacted(o.URL), err)
	}
	h.Answer(c.now(), r)
	c.apply(c.now())
	go c.run()
	return c, nil
}

var quietOnce sync.Once

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func (c *Cluster) now() int64 { return int64(time.Since(c.epoch)) }

// usage reads the engine's running totals for every cap of every group,
// and where the groups share the device by weight, their totals on it
// (lease.Host.SetShares) and their leases of device time.
func (c *Cluster) usage(now int64) []lease.Usage {
	var out []lease.Usage
	sh := c.eng.Sharing()
	var groups []lease.ShareUse
	for _, g := range sh.Groups {
		groups = append(groups, lease.ShareUse{Group: g.Group, Weight: g.Weight, Units: g.Units, BusyNs: g.BusyNs})
	}
	c.mu.Lock()
	c.h.SetShares(now, lease.DeviceUse{Capacity: sh.Held || sh.Device.Queued, Saturated: sh.Device.Saturated || sh.Device.Queued}, groups)
	allots := c.h.Allots(now)
	c.mu.Unlock()
	c.unitNs.Store(sh.Device.ReadNs)
	for _, g := range sh.Groups {
		// A lease for the groups that use the device here: one that
		// starts is held by the device's capacity until it has one.
		if a := allots[g.Group]; a > 0 && c.h.ShareActive(g.Group) {
			out = append(out, lease.Usage{Key: lease.Key{Group: g.Group, Cap: lease.DevKey}, Limit: a,
				Used: g.Units, Waited: g.WaitedNs, Waiting: g.Waiting, Ops: g.Ops})
		}
	}
	for _, g := range c.eng.Capped() {
		l, n := g.Limit, &g.Counters
		rw := n.RDemandNs // readahead that waits keeps no reader waiting
		r, w := g.Waiting[throttle.Read], g.Waiting[throttle.Write]
		for _, u := range []lease.Usage{
			{Key: lease.Key{Group: g.Group, Cap: "rbps"}, Limit: l.RBPS, Used: n.RBytes, Waited: rw, Waiting: r, Ops: n.RIOs},
			{Key: lease.Key{Group: g.Group, Cap: "wbps"}, Limit: l.WBPS, Used: n.WBytes, Waited: n.WThrottledNs, Waiting: w, Ops: n.WIOs},
			{Key: lease.Key{Group: g.Group, Cap: "riops"}, Limit: l.RIOPS, Used: n.RIOs, Waited: rw, Waiting: r, Ops: n.RIOs},
			{Key: lease.Key{Group: g.Group, Cap: "wiops"}, Limit: l.WIOPS, Used: n.WIOs, Waited: n.WThrottledNs, Waiting: w, Ops: n.WIOs},
		} {
			if u.Limit != 0 {
				out = append(out, u)
			}
		}
	}
	return out
}

// send runs the lease script for req.
func (c *Cluster) send(ctx context.Context, req lease.Request) (lease.Reply, error) {
	keys, args := req.Args(c.opts.Name, c.opts.Host, c.h.Options())
	v, err := c.script.Run(ctx, c.rdb, keys, args...).Result()
	if err != nil {
		return lease.Reply{}, err
	}
	return lease.ParseReply(v, len(req.Keys))
}

// poll is how often the loop looks at the groups' use.
func (c *Cluster) poll() time.Duration { return c.h.Options().Renew / 10 }

// run looks at the groups' use every poll while one of them waits for
// its throttle or wanted more than it held (it may want more still, or no
// longer), and otherwise only when a request is due, or when the engine
// says one may have begun to wait: an idle mount wakes ten times a
// second, not a hundred.
func (c *Cluster) run() {
	defer close(c.done)
	c.eng.NotifyQueued(c.queued)
	defer c.eng.NotifyQueued(nil)
	t := time.NewTimer(c.poll())
	defer t.Stop()
	// soon says the timer is set a poll after the last look at most: a
	// token from the engine then changes nothing, and is not taken (a
	// token taken wakes this goroutine; they come as often as requests
	// start to wait, thousands a second).
	soon, last := true, c.now()
	for {
		queued := c.queued
		if soon {
			queued = nil
		}
		select {
		case <-c.quit:
			return
		case r := <-c.results:
			c.mu.Lock()
			if r.err != nil {
				c.h.Fail(r.at)
				c.lastErr = r.err
			} else {
				c.h.Answer(r.at, r.reply)
			}
			c.mu.Unlock()
		case <-queued:
			soon = true
			t.Reset(max(time.Duration(last+int64(c.poll())-c.now()), 0))
			continue
		case <-t.C:
		}
		now := c.now()
		last = now
		use := c.usage(now)
		busy := false
		for _, u := range use {
			busy = busy || u.Waiting > 0
		}
		c.mu.Lock()
		if c.h.Due(now) || c.h.Early(now, use) {
			req := c.h.Request(now, use)
			go c.ask(req)
		}
		// Idle, the next look is when a request is due, or a lease
		// ends (its group then holds its fallback), a Renew at most.
		wake := min(c.h.Next(), now+int64(c.h.Options().Renew))
		for _, x := range c.h.Holds(now) {
			busy = busy || x.Wants
			if x.Leased {
				wake = min(wake, x.Until)
			}
		}
		next := c.poll()
		if !busy {
			next = max(time.Duration(wake-now), c.poll())
		}
		c.mu.Unlock()
		c.apply(now)
		t.Reset(next)
		soon = busy
	}
}

// ask sends req and hands the outcome to the loop.
func (c *Cluster) ask(req lease.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), c.h.Options().Timeout)
	defer cancel()
	r, err := c.send(ctx, req)
	select {
	case c.results <- result{at: c.now(), reply: r, err: err}:
	case <-c.quit:
	}
}

// apply holds every shared cap's group to what it holds at now, and
// logs the fallback taken or left.
func (c *Cluster) apply(now int64) {
	c.mu.Lock()
	holds := c.h.Holds(now)
	seen := c.h.Seen()
	lastErr := c.lastErr
	elsewhere := false
	if c.h.Answered() {
		for _, x := range c.h.Pool() {
			elsewhere = elsewhere || x.Host != c.opts.Host && x.Uses()
		}
	}
	c.mu.Unlock()
	if elsewhere != c.elsewhere {
		c.eng.SetElsewhere(elsewhere)
		c.elsewhere = elsewhere
	}
	want := map[string]throttle.Lease{}
	fallback := false
	for _, x := range holds {
		l := want[x.Group]
		switch x.Cap {
		case "rbps":
			l.RBPS = x.Rate
		case "wbps":
			l.WBPS = x.Rate
		case "riops":
			l.RIOPS = x.Rate
		case "wiops":
			l.WIOPS = x.Rate
		case lease.DevKey:
			// Reference I/Os a second, as device ns a second by this
			// host's model now.
			l.Dev = max(int64(float64(x.Rate)*float64(c.unitNs.Load())/1e6), 1)
		}
		want[x.Group] = l
		// A lease of device time is asked for as the device saturates:
		// until its first answer it is not a fallback.
		fallback = fallback || !x.Leased && (x.Cap != lease.DevKey || !c.h.Answered())
	}
	for g, l := range want {
		if c.leased[g] != l {
			c.eng.SetLease(g, l)
			c.leased[g] = l
		}
	}
	for g := range c.leased {
		if _, ok := want[g]; !ok {
			c.eng.SetLease(g, throttle.Lease{})
			delete(c.leased, g)
		}
	}
	switch {
	case fallback && !c.lost:
		c.lost = true
		c.opts.Log("cluster %s: no lease from %s (%v): holding each shared cap at its fallback, the cap over the %d hosts seen in the last %v",
			c.opts.Name, Redacted(c.opts.URL), lastErr, seen, c.h.Options().Seen)
	case !fallback && c.lost:
		c.lost = false
		c.opts.Log("cluster %s: leases from %s again", c.opts.Name, Redacted(c.opts.URL))
	}
}

// Close stops sharing: the leases are given back, so that the other hosts
// need not wait for them to end, and the groups held to their caps again.
func (c *Cluster) Close() {
	close(c.quit)
	<-c.done
	ctx, cancel := context.WithTimeout(context.Background(), c.h.Options().Timeout)
	defer cancel()
	c.mu.Lock()
	holds := c.h.Holds(c.now())
	c.mu.Unlock()
	if len(holds) > 0 {
		ks := make([]lease.Key, len(holds))
		for i, x := range holds {
			ks[i] = x.Key
		}
		c.release.Run(ctx, c.rdb, lease.RedisKeys(c.opts.Name, ks), c.opts.Host)
	}
	for g := range c.leased {
		c.eng.SetLease(g, throttle.Lease{})
	}
	c.rdb.Close()
}

// Status is what `sluice stat` shows of the cluster.
type Status struct {
	URL  string `json:"url"`
	Name string `json:"name"`
	Host string `json:"host"`
	// Answered says the last lease request was answered; Seen is how many
	// hosts the server saw in the last minute.
	Answered bool `json:"answered"`
	Seen     int  `json:"hosts_seen"`
	// Trips and Failures count the lease requests answered and not;
	// TripsPerSec is Trips over the time since the mount joined.
	Trips       int64   `json:"round_trips"`
	Failures    int64   `json:"failures"`
	TripsPerSec float64 `json:"round_trips_per_sec"`
	// RTTUs and RTTMaxUs are the last and the largest round trip, µs.
	RTTUs    int64 `json:"rtt_us"`
	RTTMaxUs int64 `json:"rtt_max_us"`
	// RTTCounts counts the round trips by lease.RTTBounds, RTTSumNs is
	// their sum: what /metrics exports as a histogram.
	RTTCounts []int64 `json:"-"`
	RTTSumNs  int64   `json:"-"`
	LastErr   string  `json:"last_error,omitempty"`
	Caps      []Cap   `json:"caps"`
}

// Cap is one shared cap's state. Key "dev" is a group's part of a device
// the hosts share by weight (lease.DevKey): its figures are device time in
// reference I/Os a second, 4 KiB random reads as each host's model prices
// them, and Limit and Shared what the division of the device gives the
// group over every host.
type Cap struct {
	Group string `json:"group"`
	Key   string `json:"cap"`
	// Limit is this host's cap; Shared the cap the holders share.
	Limit  int64 `json:"limit"`
	Shared int64 `json:"shared"`
	// Rate is what the group may use here now: its lease, or its fallback
	// where Leased is false.
	Rate   int64 `json:"rate"`
	Leased bool  `json:"leased"`
	// Use is this host's use per second, Total every holder's, and
	// Holders how many hosts hold a lease on it.
	Use     int64 `json:"use"`
	Total   int64 `json:"cluster_use"`
	Holders int64 `json:"holders"`
}

// Status returns the cluster's state now.
func (c *Cluster) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	st := c.h.Stats()
	s := Status{URL: Redacted(c.opts.URL), Name: c.opts.Name, Host: c.opts.Host, Answered: c.h.Answered(),
		Seen: c.h.Seen(), Trips: st.Trips, Failures: st.Failures, RTTUs: st.RTT / 1e3, RTTMaxUs: st.RTTMax / 1e3,
		RTTCounts: st.RTTCounts[:], RTTSumNs: st.RTTSum}
	if d := now - c.started; d > 0 {
		s.TripsPerSec = float64(st.Trips) * 1e9 / float64(d)
	}
	if c.lastErr != nil && !s.Answered {
		s.LastErr = c.lastErr.Error()
	}
	for _, x := range c.h.Holds(now) { // sorted by group and cap
		k := Cap{Group: x.Group, Key: x.Cap, Limit: x.Limit, Shared: x.Shared, Rate: x.Rate,
			Leased: x.Leased, Use: x.Use, Total: x.Total, Holders: x.Holders}
		if x.Cap == lease.DevKey {
			// Millionths of a reference I/O: shown in reference I/Os.
			for _, v := range []*int64{&k.Limit, &k.Shared, &k.Rate, &k.Use, &k.Total} {
				*v = (*v + 5e5) / 1e6
			}
		}
		s.Caps = append(s.Caps, k)
	}
	return s
}
