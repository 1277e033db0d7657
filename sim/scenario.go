package sim

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"sluice/device"
	"sluice/group"
	"sluice/mirror"
	"sluice/stack"
	"sluice/throttle"
	"sluice/tomlpos"
)

// Scenario is one experiment: devices, groups and their limits, sluice's
// mount options and fio-like jobs. See scenarios/README.md for the file
// format.
type Scenario struct {
	Name     string   `toml:"name"`
	Seed     uint64   `toml:"seed"`
	Duration Duration `toml:"duration"` // stop here at the latest; 0: when every job ends
	// Compare is the comparison run when the command line gives none,
	// "KEY=V1,V2,..." as --compare takes it.
	CompareDefault string `toml:"compare"`

	Mount     Mount       `toml:"mount"`
	Devices   []Device    `toml:"device"`
	Groups    []Group     `toml:"group"`
	Jobs      []Job       `toml:"job"`
	Published []Published `toml:"published"`
	Expect    []Expect    `toml:"expect"`

	file string
	src  string
}

// Mount holds the `sluice mount` flags that affect policy, and the FUSE
// round trip the simulator charges each request. Keys a scenario leaves
// out keep the defaults of `sluice mount` (stack.DefaultOptions).
type Mount struct {
	MaxIO           Size     `toml:"max-io"`
	Readahead       Size     `toml:"readahead"` // 0: off
	ReadaheadBudget bool     `toml:"readahead-budget"`
	Cache           Size     `toml:"cache"`
	Burst           Duration `toml:"burst"`        // 0: no idle credit
	MaxWait         Duration `toml:"max-wait"`     // 0: no cap
	MaxRead         Size     `toml:"max-read"`     // largest FUSE read or write request; 0: 1MiB
	FuseLatency     Duration `toml:"fuse-latency"` // per FUSE request
	// WakeLatency is how late the stack's wake-ups come (the mount's
	// engine sleeps on a timer, which the kernel fires late); none when
	// not given.
	WakeLatency Dist `toml:"wake-latency"`
	// WriteThrottle is where writes are throttled: "write" (sluice: paced
	// at write()) or "writeback" (the kernel's block throttle: write()
	// dirties the page cache and the flusher is throttled).
	WriteThrottle string `toml:"write-throttle"`
	DirtyLimit    Size   `toml:"dirty-limit"` // page cache dirty limit for writeback
	// Mirrors names devices that hold the same data: jobs without a
	// device of their own read from one of them, chosen per device read by
	// ReadPolicy (mirror.Names; default mirror.Default, as the mount), and write to all.
	Mirrors    []string `toml:"mirrors"`
	ReadPolicy string   `toml:"read-policy"`
	// CacheMode is how limited groups' reads are served, as the mount's
	// --cache-mode: auto (the default), direct or kernel; groups without a
	// limit always read through the kernel's page cache (pagecache.go).
	CacheMode string `toml:"cache-mode"`
	PageCache Size   `toml:"page-cache"` // the kernel's page cache for the mount's files; 0: 4GiB
	// WriteCache is the mount's --write-cache, MapDirty its dirty bound
	// (--map-dirty; 0: 64MiB). See kernel.go.
	WriteCache bool `toml:"write-cache"`
	MapDirty   Size `toml:"map-dirty"`
}

// defaultWriteCacheDirty and defaultMapDirty are map-dirty's defaults
// with write-cache and without, as the mount's (fsys.DefaultWriteCacheDirty,
// fsys.DefaultMapDirty).
const (
	defaultWriteCacheDirty = 64 << 20
	defaultMapDirty        = 4 << 20
)

// defaultDirtyLimit is the page cache's dirty limit when a scenario gives
// none: vm.dirty_ratio's 20 % of 5 GiB.
const defaultDirtyLimit = 1 << 30

// defaultMount is the [mount] table of a scenario that gives none.
func defaultMount() Mount {
	d := stack.DefaultOptions()
	return Mount{
		MaxIO: Size(d.MaxIO), Readahead: Size(d.Readahead), ReadaheadBudget: d.ReadaheadBudget,
		Cache: Size(d.CacheBytes), Burst: Duration(d.Burst), MaxWait: Duration(d.MaxWait),
		FuseLatency: Duration(defaultFuseLatency),
	}
}

// defaultFuseLatency is the FUSE round trip when a scenario gives none:
// about what a 4 KiB read through sluice takes on the bench's VM at full
// speed.
const defaultFuseLatency = 25 * time.Microsecond

// mountKeys names the [mount] key of each field of stack.Options.
var mountKeys = map[string]string{
	"MaxIO":           "max-io",
	"Readahead":       "readahead",
	"ReadaheadBudget": "readahead-budget",
	"CacheBytes":      "cache",
	"Burst":           "burst",
	"MaxWait":         "max-wait",
}

// mountError is a [mount] value the stack cannot use.
type mountError struct {
	key, value, want string
}

func (e *mountError) Error() string { return fmt.Sprintf("%s %s: want %s", e.key, e.value, e.want) }

// Device is a modelled disk.
type Device struct {
	Name           string      `toml:"name"`
	Bandwidth      Size        `toml:"bandwidth"`       // bytes per second
	WriteBandwidth Size        `toml:"write-bandwidth"` // of writes; 0: bandwidth
	Latency        Dist        `toml:"latency"`
	Seek           Dist        `toml:"seek"` // positioning time of a random I/O; none when not given
	QueueDepth     int         `toml:"queue-depth"`
	Slow           []Slowdown  `toml:"slow"`
	Fail           []FaultSpec `toml:"fail"`
}

// Slowdown multiplies a device's service time within a window.
type Slowdown struct {
	At     Duration `toml:"at"`
	Until  Duration `toml:"until"`
	Factor float64  `toml:"factor"`
}

// FaultSpec fails a device's I/Os of one kind within a window.
type FaultSpec struct {
	At    Duration `toml:"at"`
	Until Duration `toml:"until"`
	Op    Op       `toml:"op"`
}

// Group is a group and its limits in `sluice set` form ("rbps=1MB").
type Group struct {
	Name   string `toml:"name"`
	Limits string `toml:"limits"`
}

// Job is a fio job: the fio option names and meanings, numjobs copies.
type Job struct {
	Name      string   `toml:"name"`
	Group     string   `toml:"group"`
	Device    string   `toml:"device"`
	RW        string   `toml:"rw"` // read, write, randread, randwrite, sync
	BS        Size     `toml:"bs"`
	Size      Size     `toml:"size"`    // bytes of the file each job works on
	Runtime   Duration `toml:"runtime"` // 0: until size is done
	NumJobs   int      `toml:"numjobs"`
	IODepth   int      `toml:"iodepth"`
	Direct    bool     `toml:"direct"`
	Fsync     int      `toml:"fsync"` // fsync after every N writes
	Start     Duration `toml:"start"`
	Shared    bool     `toml:"shared"`     // the copies share one file (fio's filename=)
	TimeBased bool     `toml:"time-based"` // loop over the file until runtime
	// Mmap writes through a shared mapping (fio's ioengine=mmap): pages
	// are faulted in through sluice, dirtied in the page cache and
	// written back by the kernel (see kernel.go).
	Mmap bool `toml:"mmap"`
}

// Published is a figure from the seed's thread, printed beside the
// simulated one: the job's figure under a configuration of the comparison.
type Published struct {
	Config string  `toml:"config"` // the --compare value it stands beside, or "" for every run
	Job    string  `toml:"job"`
	Metric string  `toml:"metric"` // bw, iops, clat-max, clat-avg, dev-iops, sync-time
	Value  float64 `toml:"value"`  // in the metric's unit (KiB/s, IOPS, ms, s)
	Label  string  `toml:"label"`  // what the seed called it
}

// Expect is a direction the seed reports, asserted on the results: the
// metric of job under config A compared with B (or with a bound).
//
// The figure compared is the job's metric, over the window From to Until
// when one is given (bw and iops only), over Alone when given (the job's
// figure alone on the device: what is left is its share of the device's
// time), and over the same of job Vs in the same run when given.
type Expect struct {
	Job    string  `toml:"job"`
	Metric string  `toml:"metric"`
	A      string  `toml:"a"`     // configuration
	B      string  `toml:"b"`     // configuration, or "" with Min/Max
	Ratio  float64 `toml:"ratio"` // A/B must be at most Ratio (when < 1) or at least (when > 1)
	Min    float64 `toml:"min"`
	Max    float64 `toml:"max"`
	// From and Until bound the window the figure is measured over, on
	// the run's 100 ms buckets; Until 0 is the job's last completion.
	From  Duration `toml:"from"`
	Until Duration `toml:"until"`
	Alone float64  `toml:"alone"` // the job's figure alone on its device; 0: none
	// Vs is another job: the figure is the job's over Vs's, each over
	// its figure alone (Alone, VsAlone) when given.
	Vs      string  `toml:"vs"`
	VsAlone float64 `toml:"vs-alone"`
	// Pending says that the expectation describes a target sluice does
	// not meet yet, and what is to meet it: --check still asserts it and
	// shows it as pending; the test of the shipped scenarios reports it
	// and fails once it holds, for the mark to go.
	Pending string `toml:"pending"`
}

// Size is a byte count written with units ("4k", "1MiB", "10MB").
type Size int64

func (s *Size) UnmarshalText(b []byte) error {
	n, err := group.ParseSize(string(b))
	*s = Size(n)
	return err
}

// Duration is a time.Duration written as "100us", "2s".
type Duration time.Duration

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q: want a duration such as 100us or 2s", b)
	}
	if v < 0 {
		return fmt.Errorf("%q: must not be negative", b)
	}
	*d = Duration(v)
	return nil
}

// Dist is a latency distribution (see device.ParseDist).
type Dist struct{ device.Dist }

func (d *Dist) UnmarshalText(b []byte) error {
	v, err := device.ParseDist(string(b))
	d.Dist = v
	return err
}

// Op is a device operation kind: read, write or flush.
type Op struct{ device.Op }

func (o *Op) UnmarshalText(b []byte) error {
	for _, v := range []device.Op{device.Read, device.Write, device.Flush} {
		if v.String() == string(b) {
			o.Op = v
			return nil
		}
	}
	return fmt.Errorf("%q: want read, write or flush", b)
}

// Load reads and checks a scenario file. Errors name the file, the line
// and the field.
func Load(file string) (*Scenario, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Parse(file, string(b))
}

// Parse reads a scenario from src; file names it in errors.
func Parse(file, src string) (*Scenario, error) {
	sc := &Scenario{file: file, src: src, Mount: defaultMount()}
	md, err := toml.Decode(src, sc)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			key := pe.LastKey
			if key == "" {
				return nil, fmt.Errorf("%s:%d: %s", file, pe.Position.Line, pe.Message)
			}
			return nil, fmt.Errorf("%s:%d: %s: %s", file, pe.Position.Line, key, pe.Message)
		}
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		k := u[0]
		return nil, sc.errAt(k, "unknown field %q", k[len(k)-1])
	}
	if err := sc.check(); err != nil {
		return nil, err
	}
	return sc, nil
}

// errAt formats an error about the field at key path k, with its line.
func (sc *Scenario) errAt(k toml.Key, format string, a ...any) error {
	return fmt.Errorf("%s:%d: %s: %s", sc.file, sc.line(k), keyString(k), fmt.Sprintf(format, a...))
}

func keyString(k toml.Key) string { return strings.Join(k, ".") }

// line finds the line of key path k (see tomlpos.Line).
func (sc *Scenario) line(k toml.Key) int { return tomlpos.Line(sc.src, k) }

func jobKey(i int, field string) toml.Key { return toml.Key{"job", strconv.Itoa(i), field} }

// check validates what the decoder cannot: names, references, ranges.
func (sc *Scenario) check() error {
	if len(sc.Devices) == 0 {
		sc.Devices = []Device{{Name: "disk", Bandwidth: 500 << 20, Latency: Dist{device.Dist{Kind: "const", A: 100 * time.Microsecond}}, QueueDepth: 32}}
	}
	devs := map[string]bool{}
	for i, d := range sc.Devices {
		k := func(f string) toml.Key { return toml.Key{"device", strconv.Itoa(i), f} }
		switch {
		case d.Name == "":
			return sc.errAt(k("name"), "every device needs a name")
		case devs[d.Name]:
			return sc.errAt(k("name"), "device %q defined twice", d.Name)
		case d.Bandwidth < 0:
			return sc.errAt(k("bandwidth"), "must not be negative")
		case d.WriteBandwidth < 0:
			return sc.errAt(k("write-bandwidth"), "must not be negative")
		case d.QueueDepth < 0:
			return sc.errAt(k("queue-depth"), "must not be negative")
		}
		for _, s := range d.Slow {
			if s.Factor <= 0 || s.Until <= s.At {
				return sc.errAt(k("slow"), "want factor > 0 and until after at")
			}
		}
		devs[d.Name] = true
	}
	if m := sc.Mount.Mirrors; len(m) > 0 {
		seen := map[string]bool{}
		for _, name := range m {
			switch {
			case !devs[name]:
				return sc.errAt(toml.Key{"mount", "mirrors"}, "no device %q", name)
			case seen[name]:
				return sc.errAt(toml.Key{"mount", "mirrors"}, "device %q listed twice", name)
			}
			seen[name] = true
		}
		if len(m) < 2 {
			return sc.errAt(toml.Key{"mount", "mirrors"}, "a mirror set needs at least two devices")
		}
	}
	groups := map[string]bool{}
	all := map[string]throttle.Limits{}
	for i, g := range sc.Groups {
		k := func(f string) toml.Key { return toml.Key{"group", strconv.Itoa(i), f} }
		if throttle.Clean(g.Name) == "" {
			return sc.errAt(k("name"), "every group needs a name")
		}
		l, err := sc.limits(g)
		if err != nil {
			return sc.errAt(k("limits"), "%v", err)
		}
		// The groups' limits must hold together (a floor within its caps).
		all[g.Name] = l
		if err := throttle.New(throttle.Config{}).Check(all); err != nil {
			return sc.errAt(k("limits"), "%v", err)
		}
		groups[throttle.Clean(g.Name)] = true
	}
	names := map[string]bool{}
	for i, j := range sc.Jobs {
		switch {
		case j.Name == "":
			return sc.errAt(jobKey(i, "name"), "every job needs a name")
		case names[j.Name]:
			return sc.errAt(jobKey(i, "name"), "job %q defined twice", j.Name)
		case !slices.Contains([]string{"read", "write", "randread", "randwrite", "sync"}, j.RW):
			return sc.errAt(jobKey(i, "rw"), "%q: want read, write, randread, randwrite or sync", j.RW)
		case j.RW == "sync":
			// One sync(2) per copy at its start: no file, no size.
		case j.BS <= 0:
			return sc.errAt(jobKey(i, "bs"), "want a positive block size such as 4k")
		case j.Size <= 0:
			return sc.errAt(jobKey(i, "size"), "want the file size, such as 1GiB")
		case j.NumJobs < 0:
			return sc.errAt(jobKey(i, "numjobs"), "must not be negative")
		case j.IODepth < 0:
			return sc.errAt(jobKey(i, "iodepth"), "must not be negative")
		case j.Fsync < 0:
			return sc.errAt(jobKey(i, "fsync"), "must not be negative")
		case j.Mmap && j.RW != "write" && j.RW != "randwrite":
			return sc.errAt(jobKey(i, "mmap"), "models writers only: want rw = write or randwrite")
		case j.Mmap && j.Direct:
			return sc.errAt(jobKey(i, "mmap"), "a mapping has no direct I/O: want direct = false")
		case j.Group == "":
			return sc.errAt(jobKey(i, "group"), "every job runs in a group")
		case j.Device != "" && !devs[j.Device]:
			return sc.errAt(jobKey(i, "device"), "no device %q", j.Device)
		}
		names[j.Name] = true
	}
	if len(sc.Jobs) == 0 {
		return fmt.Errorf("%s: no [[job]]: a scenario needs at least one", sc.file)
	}
	for i, e := range sc.Expect {
		k := func(f string) toml.Key { return toml.Key{"expect", strconv.Itoa(i), f} }
		window := e.From > 0 || e.Until > 0
		switch {
		case e.Vs != "" && !names[e.Vs]:
			return sc.errAt(k("vs"), "no job %q", e.Vs)
		case e.VsAlone != 0 && e.Vs == "":
			return sc.errAt(k("vs-alone"), "is the figure alone of job vs: want vs")
		case e.Alone < 0 || e.VsAlone < 0:
			return sc.errAt(k("alone"), "must not be negative")
		case window && e.Metric != "bw" && e.Metric != "iops":
			return sc.errAt(k("from"), "a window is for bw and iops, not %s", e.Metric)
		case int64(e.From)%bucket != 0 || int64(e.Until)%bucket != 0:
			return sc.errAt(k("from"), "want from and until on the %v buckets of the run", time.Duration(bucket))
		case e.Until > 0 && e.Until <= e.From:
			return sc.errAt(k("until"), "want until after from")
		}
	}
	if _, err := sc.options(); err != nil {
		var me *mountError
		if errors.As(err, &me) {
			return sc.errAt(toml.Key{"mount", me.key}, "%s: want %s", me.value, me.want)
		}
		return fmt.Errorf("%s:%d: mount: %v", sc.file, sc.line(toml.Key{"mount"}), err)
	}
	if sc.CompareDefault != "" {
		key, vals, err := ParseCompare(sc.CompareDefault)
		if err == nil {
			for _, v := range vals {
				if err = sc.clone().Set(key, v); err != nil {
					break
				}
			}
		}
		if err != nil {
			return sc.errAt(toml.Key{"compare"}, "%v", strings.TrimPrefix(err.Error(), "--compare "))
		}
	}
	return nil
}

// limits returns g's limits: each key its Limits give, max for the others.
func (sc *Scenario) limits(g Group) (throttle.Limits, error) {
	if strings.TrimSpace(g.Limits) == "" {
		return throttle.Limits{}, nil
	}
	spec, err := group.ParseLimit("x " + g.Limits)
	if err != nil {
		return throttle.Limits{}, err
	}
	return spec.Apply(throttle.Limits{}), nil
}

// options returns the stack options the mount section asks for; a value
// the stack cannot use is a *mountError.
func (sc *Scenario) options() (stack.Options, error) {
	m := sc.Mount
	o := stack.Options{
		MaxIO: int64(m.MaxIO), Readahead: int64(m.Readahead), ReadaheadBudget: m.ReadaheadBudget,
		CacheBytes: int64(m.Cache), Burst: time.Duration(m.Burst), MaxWait: time.Duration(m.MaxWait),
	}
	if err := o.Validate(); err != nil {
		var oe *stack.OptionError
		if errors.As(err, &oe) {
			return o, &mountError{key: mountKeys[oe.Field], value: oe.Value, want: oe.Want}
		}
		return o, err
	}
	if p := m.ReadPolicy; p != "" && !slices.Contains(mirror.Names, p) {
		return o, &mountError{key: "read-policy", value: p, want: "one of " + strings.Join(mirror.Names, ", ")}
	}
	if m.FuseLatency <= 0 {
		// Reads answered from a cache would take no time at all, and a
		// time-based job would never end.
		return o, &mountError{key: "fuse-latency", value: time.Duration(m.FuseLatency).String(), want: "a positive duration such as 25us"}
	}
	if _, ok := stack.ParseCacheMode(m.CacheMode); !ok {
		return o, &mountError{key: "cache-mode", value: m.CacheMode, want: "auto, direct or kernel"}
	}
	for _, j := range sc.Jobs {
		if j.Mmap && m.WriteThrottle == "writeback" {
			return o, &mountError{key: "write-throttle", value: "writeback", want: "write: job " + j.Name + " writes through a mapping, which models sluice's mount"}
		}
	}
	if m.WriteCache && m.WriteThrottle == "writeback" {
		return o, &mountError{key: "write-cache", value: "true", want: "write-throttle = \"write\": the write cache is sluice's, writeback the kernel's own path"}
	}
	if w := m.WriteThrottle; w != "" && w != "write" && w != "writeback" {
		return o, &mountError{key: "write-throttle", value: w, want: "write (sluice's pacing at write()) or writeback (the kernel's throttle of the flusher)"}
	}
	return o, nil
}
