package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"sluice/backing"
	"sluice/cluster"
	"sluice/control"
	"sluice/fsys"
	"sluice/group"
	"sluice/metrics"
	"sluice/mirror"
	"sluice/stack"
)

const mountHelp = `Usage: sluice mount [flags] SOURCE MOUNTPOINT
       sluice mount [flags] --mirror DIR1 --mirror DIR2 [--mirror DIR3...] MOUNTPOINT

Serves the directory SOURCE on MOUNTPOINT in the foreground. Every read and
write by a caller whose group has a limit goes through sluice's per-group
throttle (reads below 32 MiB/s through its own page cache and readahead,
above through the kernel's: see --cache-mode); callers without a limit pay
little.
Stop it with Ctrl-C or SIGTERM: it unmounts cleanly.
  sluice mount --limit 'default rbps=10MiB' /srv/data /mnt/data
  sluice mount --config /etc/sluice/data.toml
Upgrade it without unmounting: a new sluice takes the mount over, with its
open files, groups and limits; applications only wait while it does. Or
send the running one SIGUSR2: it starts the binary on disk to take over.
  sluice mount --takeover /mnt/data

Limits use the cgroup v2 io.max vocabulary, one --limit per group:
  --limit 'default rbps=10MiB riops=max'
  --limit 'tenants/a rbps=1MiB wbps=1MiB wiops=100'
Keys: rbps, wbps (bytes/s), riops, wiops (I/Os per second, counted per
--max-io piece); max means unlimited. Sizes: 512k, 10MiB, 1.5G (k K KiB M MiB
G GiB T TiB are powers of 1024; kB MB GB TB powers of 1000). weight=N (1 to
10000, default 100): a group's share beside its siblings when their parent's
limit is reached, by bytes: --limit 'tenants/a weight=200'. Floors
rbps.min, wbps.min, riops.min, wiops.min (none for no floor): what a group
gets of its parent's limit first, whatever its weight. Where no level above
caps it, a weight or floor shares SOURCE itself, by device time, once it is
saturated (learned from completions; nobody waits before), and target=5ms
(none: no target) holds the group's I/O latency there, as io.latency.

Groups: a caller is in the group of the first --group rule it matches, else
in "default". All conditions of one rule must hold; repeat a rule for OR.
  --group 'backup uid=34'          --group 'builds gid=1001'
  --group 'sync comm=rsync'        --group 'svc cgroup=/system.slice/backup.service'
Group names may be paths (tenants/a): a request is charged to its group and
every ancestor, and the tightest level governs. uid, gid and cgroup are set
by root (or by whoever may move a process between cgroups); comm is the
caller's own choice (prctl), a convenience, not a boundary between tenants.

Mirror sets: with --mirror (twice or more, no SOURCE) the directories, which
must hold the same content, are served as one tree. Each read goes to one
mirror, chosen by --read-policy, and to another if it fails; writes and
changes go to all. A mirror that fails one where another succeeded is marked
stale (in ` + "`.sluice-mirror`" + ` in each mirror's root, so a restart keeps it
stale) and is neither read nor written again; the last healthy one never is.
  --mirror /mnt/nvme/data --mirror /mnt/ssd/data --read-policy adaptive

Each write() reaches sluice as a request of its own. With --write-cache the
kernel's page cache gathers those of groups without a write limit (and,
with --cache-mode kernel, of groups whose write limit writes back the dirty
bound of --map-dirty within 100 ms: 640 MiB/s for 64 MiB; sluice paces that
writeback) and sends them on in large writes: small writes run near native speed, but a write()
returns before its data reaches SOURCE (close and fsync wait for it and
report its errors; sync does not wait), and a file changed on SOURCE behind
sluice's back keeps its old size through the mount.

Every caller gets through the mount exactly what its uid gets on SOURCE:
the kernel checks modes and POSIX ACLs, and new files, directories and
links are created with the caller's uid, gid, groups and umask.
`

type mountOpts struct {
	limits     multi
	groups     multi
	maxIO      sizeFlag
	ra         sizeFlag
	budget     onOff
	cache      sizeFlag
	burst      time.Duration
	maxWait    string
	allow      bool
	maxOpen    int
	groupOpen  int
	mapDirty   string
	writeCache bool
	cacheMode  string
	pass       bool
	transport  string
	debug      bool
	mirrors    multi
	policy     string
	config     string
	metrics    string
	// metricsTimeout is every timeout of the metrics server's
	// connections (metrics.ServerOptions).
	metricsTimeout time.Duration
	metricsConns   int
	logLevel       string
	// Mount flags and the service's clean-up (dist/sluice@.service).
	readOnly    bool
	noExec      bool
	unmountDead bool
	// takeover takes the mount over from the sluice serving it.
	takeover bool
	// supervise keeps the mount across a crash of its process.
	supervise bool
	// The cluster whose mounts share the groups' caps (package cluster).
	cluster, clusterName, clusterHost, clusterCA string
}

// The groups mount's flags are listed under in its help.
const (
	groupLimits = "Limits and groups"
	groupCache  = "Reads, writes and caching"
	groupMirror = "Mirror sets"
	groupMount  = "Mounting"
	groupLog    = "Logging and metrics"
	groupHosts  = "Limits shared across hosts"
)

// cacheModes, logLevels and mapDirtyWords are the words --cache-mode,
// --log-level and --map-dirty take (--map-dirty a size too), as they are
// checked, listed in help and completed.
var (
	cacheModes    = []string{"auto", "direct", "kernel"}
	logLevels     = []string{"debug", "info", "warn", "error"}
	mapDirtyWords = []string{"auto", "kernel"}
)

// mountFlags returns mount's flags, defined group by group in the order
// help lists them, bound to the options they set.
func mountFlags() (*pflag.FlagSet, *mountOpts) {
	d := stack.DefaultOptions()
	md := metrics.DefaultServerOptions()
	o := &mountOpts{
		maxIO: sizeFlag(d.MaxIO), ra: sizeFlag(d.Readahead), budget: onOff(d.ReadaheadBudget),
		cache: sizeFlag(d.CacheBytes), burst: d.Burst, maxWait: "auto",
		mapDirty: "auto", cacheMode: "auto", transport: fsys.DefaultTransport,
	}
	fs := newFlagSet("mount")
	fs.Var(&o.limits, "limit", "limits of one group: 'GROUP KEY=VALUE...' (repeatable)")
	fs.Var(&o.groups, "group", "classification rule: 'NAME uid=N|gid=N|comm=NAME|cgroup=/PATH...' (repeatable)")
	fs.DurationVar(&o.burst, "burst", o.burst, "idle credit a group may bank, as time at its rate (0: none)")
	fs.StringVar(&o.maxWait, "max-wait", o.maxWait, "longest throttle wait of one request; then it is answered with what is ready (a short read or write), at least one page forced into debt that later requests pay; auto: half the kernel's fs.fuse.max_request_timeout, or no cap when that is 0")
	fs.IntVar(&o.groupOpen, "group-max-open", 0, "files and directories one group may hold open through the mount; at it, the group's opens fail with EMFILE while other groups' go on (0: a quarter of the daemon's descriptor limit)")
	flagDoc(fs, groupLimits, map[string]string{"limit": "'GROUP KEY=VALUE...'", "group": "'NAME RULE...'", "max-wait": "DURATION|auto"})

	fs.StringVar(&o.cacheMode, "cache-mode", o.cacheMode, fmt.Sprintf("how limited groups' files are served: direct (every read() and write() reaches sluice; its readahead sized to the group's budget), kernel (the kernel's page cache serves what it holds; sluice paces the reads it sends), auto (kernel for groups whose read limits are at least %s and %d IOPS, direct below)", group.FormatSize(stack.KernelCacheBPS), stack.KernelCacheIOPS))
	fs.Var(&o.maxIO, "max-io", "largest device request; larger reads and writes are split, each piece one I/O")
	fs.Var(&o.ra, "readahead", "largest readahead window (0 turns readahead off)")
	fs.Var(&o.budget, "readahead-budget", "on: clamp asynchronous readahead to the group's byte budget; off: the kernel's behaviour")
	fs.Var(&o.cache, "cache", "memory bound of sluice's read cache")
	fs.StringVar(&o.mapDirty, "map-dirty", o.mapDirty, fmt.Sprintf("dirty pages the kernel may keep of the mount's files (written through shared mappings, and with --write-cache by write()); a limited group's mmap writer runs ahead of its limit by about this much before it is paced (auto: %s, or %s with --write-cache; kernel: the kernel's own bound, 1%% of its dirty limit)", group.FormatSize(fsys.DefaultMapDirty), group.FormatSize(fsys.DefaultWriteCacheDirty)))
	fs.BoolVar(&o.writeCache, "write-cache", false, "let the kernel's page cache take the write()s of groups with no write limit (with --cache-mode kernel, also of those whose limit writes back the --map-dirty bound within 100 ms, their writeback paced) and send them on in large writes: small writes stop paying a round trip each, but a write() returns before its data reaches SOURCE (close and fsync wait for it and report its errors; sync does not wait), and files changed on SOURCE behind sluice's back keep their old size through the mount")
	fs.BoolVar(&o.pass, "passthrough", true, "let groups with no limit open files by FUSE passthrough, for reading and writing (Linux 6.9+, as root; without, opens are served as with --passthrough=false): the kernel reads and writes SOURCE itself at native speed, and sluice counts none of it. While a file is open by passthrough the kernel takes every other open of it only by passthrough: a limited group's open of it is passed through beyond its limit, and sluice stat names such opens. Off on mirror sets and with --write-cache")
	fs.StringVar(&o.transport, "transport", o.transport, "how the kernel's requests reach sluice: dev (read and writev on /dev/fuse), uring (FUSE-over-io_uring, Linux 6.14+ with /sys/module/fuse/parameters/enable_uring Y; the mount fails without it), auto (uring where the kernel offers it, dev otherwise). Both give the same answers")
	fs.IntVar(&o.maxOpen, "max-open", 1024, "directories kept open between operations (objects are held by file handle and opened on demand; objects in use are not counted)")
	flagDoc(fs, groupCache, map[string]string{"cache-mode": strings.Join(cacheModes, "|"), "map-dirty": "SIZE|auto|kernel", "transport": "dev|uring|auto"})

	fs.Var(&o.mirrors, "mirror", "a directory of a mirror set, served in place of SOURCE (twice or more)")
	fs.StringVar(&o.policy, "read-policy", mirror.Default, "which mirror serves each read: adaptive (the one expected to answer first: decaying peak latency × reads in flight, sequential streams kept, a recovered mirror probed), pid (caller pid mod mirrors, as btrfs), roundrobin (the next mirror every 256 KiB), latency (lowest lifetime average)")
	flagDoc(fs, groupMirror, map[string]string{"mirror": "DIR", "read-policy": "POLICY"})

	fs.StringVar(&o.config, "config", "", "a TOML file holding any of these flags under their names, and source, mountpoint, mirrors and [[group]] tables (name, match, limits); flags given here win")
	fs.BoolVar(&o.allow, "allow-other", false, "let users other than the mounting one use the mount (implied by --group)")
	// Mount flags (fstab's ro and noexec) and the service's clean-up.
	fs.BoolVar(&o.readOnly, "read-only", false, "mount read-only (MS_RDONLY; fstab: ro): every write, create or change through the mount fails with EROFS. The mount is always nosuid and nodev")
	fs.BoolVar(&o.noExec, "noexec", false, "mount noexec (MS_NOEXEC; fstab: noexec): executing a file on the mount fails with EACCES")
	fs.BoolVar(&o.unmountDead, "unmount-dead", false, "mount nothing: if MOUNTPOINT holds a sluice mount whose daemon has died (statfs fails with ENOTCONN), detach it (umount -l), and exit. A live mount, or another file system's, is left alone; the service runs this before it mounts (ExecStartPre)")
	fs.BoolVar(&o.takeover, "takeover", false, "take the mount at MOUNTPOINT over from the sluice serving it, without unmounting (an upgrade): its open files and directories, groups, limits and tags carry over, and applications wait while it happens (the requests being served are answered first, 10 s at most, else the old sluice serves on). With MOUNTPOINT alone, with the old sluice's command line; the old one exits 0. Not over --transport uring, nor while a mirror set resyncs")
	fs.BoolVar(&o.supervise, "supervise", false, "keep the mount through a crash of the process serving it: this process stays as a small supervisor holding the FUSE connection, a descriptor of every open file and directory and a record of the objects the kernel holds, and runs the mount in a child; should the child die (kill -9, a panic), a new one serves on within a second, and applications wait rather than fail. SIGUSR2 to the supervisor restarts the child from the binary on disk the same way (an upgrade). Not with a mirror set, nor --transport uring")
	flagDoc(fs, groupMount, map[string]string{"config": "FILE"})

	fs.StringVar(&o.logLevel, "log-level", "info", "what the log (stderr, as key=value lines) shows: debug (every FUSE request too), info (start, stop, reloads), warn (a mirror turning stale, failures), error")
	fs.BoolVar(&o.debug, "debug", false, "log every FUSE request")
	fs.StringVar(&o.metrics, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (host:port; off when empty)")
	fs.DurationVar(&o.metricsTimeout, "metrics-timeout", md.ReadHeaderTimeout, "longest a metrics connection may take to send its request or to take its answer, or wait for its next request")
	fs.IntVar(&o.metricsConns, "metrics-max-conns", md.MaxConns, "most metrics connections served at once (more are closed as they come)")
	flagDoc(fs, groupLog, map[string]string{"log-level": "LEVEL", "metrics-listen": "ADDR"})

	fs.StringVar(&o.cluster, "cluster", "", "a Redis server through which every mount of the same --cluster-name shares its groups' caps (rbps, wbps, riops, wiops), each summed over the hosts: redis://[USER:PASSWORD@]HOST:PORT[/DB], rediss:// for TLS, or unix:///PATH. Each host leases its part ten times a second, off the I/O path; without answers it keeps its lease to its end (1 s), then holds each cap over the hosts seen in the last minute")
	fs.StringVar(&o.clusterName, "cluster-name", "", "the cluster's name: mounts of one name share the caps of groups of the same path (required with --cluster)")
	fs.StringVar(&o.clusterHost, "cluster-host", "", "this mount's name in the cluster, unique among its mounts (default: HOSTNAME:MOUNTPOINT)")
	fs.StringVar(&o.clusterCA, "cluster-ca", "", "PEM file of the certificate authorities whose signature the Redis server's certificate must bear, for a rediss:// URL (default: the system's)")
	flagDoc(fs, groupHosts, map[string]string{"cluster": "URL", "cluster-name": "NAME", "cluster-host": "NAME", "cluster-ca": "FILE"})
	return fs, o
}

// mountCommand is sluice mount; args is sluice's whole command line, which
// the mount keeps to read again on a reload.
func mountCommand(args []string, stdout, stderr io.Writer) *cobra.Command {
	fs, o := mountFlags()
	c := command("mount [flags] SOURCE MOUNTPOINT", "serve SOURCE on MOUNTPOINT (foreground)", mountHelp, fs, nil)
	c.RunE = func(c *cobra.Command, pos []string) error {
		_, line, err := c.Root().Find(args)
		if err != nil {
			return err
		}
		return cmdMount(fs, o, pos, line, stdout, stderr)
	}
	c.ValidArgsFunction = func(_ *cobra.Command, pos []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveFilterDirs
	}
	completeWords(c, "cache-mode", cacheModes)
	completeWords(c, "transport", []string{fsys.TransportDev, fsys.TransportURing, fsys.TransportAuto})
	completeWords(c, "read-policy", mirror.Names)
	completeWords(c, "readahead-budget", []string{"on", "off"})
	completeWords(c, "log-level", logLevels)
	completeWords(c, "map-dirty", mapDirtyWords)
	completeWords(c, "max-wait", []string{"auto"})
	c.RegisterFlagCompletionFunc("mirror", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveFilterDirs
	})
	c.RegisterFlagCompletionFunc("config", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"toml"}, cobra.ShellCompDirectiveFilterFileExt
	})
	return c
}

// cmdMount serves a mount: fs holds its flags as parsed, bound to o, pos
// its positional arguments, and args its command line as given.
func cmdMount(fs *pflag.FlagSet, o *mountOpts, pos, args []string, stdout, stderr io.Writer) error {
	var tk *taking
	if o.takeover {
		if err := onlyTakeover(fs, pos); err != nil {
			return err
		}
		var err error
		if tk, err = startTakeover(pos, &fs, &o, &pos, &args); err != nil {
			return err
		}
	}
	opts, err := mountFromFlags(fs, o, pos, stderr)
	if err != nil {
		tk.abort(err)
		return err
	}
	if o.unmountDead {
		tk.abort(errors.New("--unmount-dead mounts nothing"))
		return unmountDead(opts.Mountpoint, stdout)
	}
	var rc *recovering
	switch {
	case o.supervise && tk != nil:
		tk.abort(errors.New("--supervise with --takeover"))
		return usagef("--takeover with --supervise: a supervised mount is upgraded by SIGUSR2 to its supervisor, which restarts sluice from the binary on disk")
	case o.supervise && !supervised():
		if err := checkSupervise(opts); err != nil {
			return err
		}
		return supervise(opts, opts.Logger)
	case supervised():
		if opts.Journal, err = journalOf(opts.Logger); err != nil {
			return err
		}
		if rc, err = startRecovering(); err != nil {
			return err
		}
	}
	config := o.config
	var ln net.Listener
	if o.metrics != "" && tk == nil {
		if ln, err = net.Listen("tcp", o.metrics); err != nil {
			return usagef("--metrics-listen %s: %v", o.metrics, err)
		}
	}
	// The signals are caught before the mount exists: one that comes
	// while it is being set up (a service stopped as it starts) waits in
	// its channel, and unmounts once the mount is up, rather than kill
	// the daemon and leave a mount point that answers ENOTCONN.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr2)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var m *fsys.FS
	switch {
	case tk != nil:
		m, err = tk.take(opts)
	case rc != nil:
		m, err = rc.take(opts)
	default:
		m, err = fsys.Mount(opts)
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return err
	}
	spareProcs()
	log := opts.Logger
	t := &target{m: m, opts: opts, args: args, config: config, flags: flagValues(o)}
	switch {
	case rc != nil:
		t.supervised = &control.Supervised{Pid: os.Getppid(), Crashes: rc.st.Crashes, LastCrash: rc.st.LastCrash}
	case supervised():
		t.supervised = &control.Supervised{Pid: os.Getppid()}
	}
	defer t.closeListeners()
	if o.metrics != "" && tk != nil {
		// The old sluice has closed its listener by now.
		if ln, err = net.Listen("tcp", o.metrics); err != nil {
			log.Warn("metrics not served", "err", fmt.Sprintf("--metrics-listen %s: %v", o.metrics, err))
		}
	}
	if ln != nil {
		t.metrics = ln
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler(metricSource{t}))
		to := o.metricsTimeout
		go metrics.Serve(ln, mux, metrics.ServerOptions{ReadHeaderTimeout: to, ReadTimeout: to, WriteTimeout: to, IdleTimeout: to, MaxConns: o.metricsConns})
		log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}
	if o.cluster != "" {
		host := o.clusterHost
		if host == "" {
			name, _ := os.Hostname()
			host = name + ":" + opts.Mountpoint
		}
		cl, err := cluster.Join(context.Background(), m.Engine(), cluster.Options{URL: o.cluster, Name: o.clusterName, Host: host, CA: o.clusterCA,
			Log: func(format string, args ...any) { log.Warn(fmt.Sprintf(format, args...)) }})
		switch {
		case err != nil && tk != nil:
			// A mount taken over is not unmounted under its applications.
			log.Warn("not in the cluster: each of its caps holds on this host alone", "err", fmt.Sprintf("--cluster %v", err))
		case err != nil:
			m.Unmount()
			m.Wait()
			return usagef("--cluster %v", err)
		default:
			t.mu.Lock()
			t.cluster = cl
			t.mu.Unlock()
			log.Info("cluster", "name", o.clusterName, "host", host, "redis", cluster.Redacted(o.cluster))
		}
	}
	srv, err := control.Listen(opts.Mountpoint, t)
	switch {
	case err != nil && tk != nil:
		log.Warn("no control socket: sluice stat, set and reload cannot reach this mount", "err", err)
	case err != nil:
		m.Unmount()
		m.Wait()
		return err
	default:
		t.mu.Lock()
		t.control = srv
		t.mu.Unlock()
	}
	if tk != nil && opts.WriteCache != m.WriteCache() {
		log.Warn("--write-cache stays as the mount was made: the kernel agreed to it then, and only a remount changes it", "write_cache", m.WriteCache())
	}
	switch {
	case tk != nil && len(opts.Mirrors) > 0:
		log.Info("serving, taken over", "mirrors", strings.Join(m.Mirrors().Dirs(), ","), "mountpoint", opts.Mountpoint, "from_pid", tk.pid, "open_files", tk.files, "open_dirs", tk.dirs)
	case tk != nil:
		log.Info("serving, taken over", "source", opts.Source, "mountpoint", opts.Mountpoint, "from_pid", tk.pid, "open_files", tk.files, "open_dirs", tk.dirs)
	case rc != nil:
		log.Info("serving, taken over after a crash", "source", opts.Source, "mountpoint", opts.Mountpoint, "dead_pid", rc.st.Pid, "open_files", len(rc.st.FS.Files), "open_dirs", len(rc.st.FS.Dirs))
	case len(opts.Mirrors) > 0:
		log.Info("serving", "mirrors", strings.Join(opts.Mirrors, ","), "mountpoint", opts.Mountpoint, "read_policy", opts.ReadPolicy)
	default:
		log.Info("serving", "source", opts.Source, "mountpoint", opts.Mountpoint)
	}
	notify(log, "READY=1") // a Type=notify service is up
	m.Checkpoint()         // the limits in force, for a supervisor
	m.Ready()              // which says READY=1

	go func() {
		for range hup {
			end, err := t.begin()
			if err != nil {
				log.Warn("SIGHUP: reload refused", "err", err)
				continue
			}
			t.reload("SIGHUP")
			end()
		}
	}()
	go func() {
		for range usr2 {
			if t.handing.Load() || t.handed.Load() || supervised() {
				// A supervised mount is upgraded by its supervisor.
				continue
			}
			t.upgrade(log)
		}
	}()
	go func() {
		for sig := range sigs {
			if t.handed.Load() {
				continue
			}
			notify(log, "STOPPING=1")
			log.Info("unmounting", "signal", sig.String(), "mountpoint", opts.Mountpoint)
			if err := m.Unmount(); err != nil {
				log.Warn("unmount failed; detaching (the mount goes away when its last open file closes)", "err", err)
				unix.Unmount(opts.Mountpoint, unix.MNT_DETACH)
			}
		}
	}()
	m.Wait()
	return nil
}

// optionFlags names the flag of each field of stack.Options.
var optionFlags = map[string]string{
	"MaxIO":           "--max-io",
	"Readahead":       "--readahead",
	"ReadaheadBudget": "--readahead-budget",
	"CacheBytes":      "--cache",
	"Burst":           "--burst",
	"MaxWait":         "--max-wait",
}

// maxWait resolves the --max-wait flag; stack.Options.Validate checks the
// duration.
func maxWait(s string) (time.Duration, error) {
	if s != "auto" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, usagef("--max-wait %q: want auto, 0 (no cap) or a duration such as 30s", s)
		}
		return d, nil
	}
	b, err := os.ReadFile("/proc/sys/fs/fuse/max_request_timeout")
	if err != nil {
		return 0, nil
	}
	secs, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || secs <= 0 {
		return 0, nil
	}
	return time.Duration(secs) * time.Second / 2, nil
}

// target connects the control socket to a mount.
type target struct {
	m      *fsys.FS
	args   []string // the mount's command line, read again by Reload
	config string   // its config file, if any
	// flags holds the value of each mount flag the mount runs with, as
	// flagValues gives it; a reload changes none of those it compares.
	flags map[string]string

	mu   sync.Mutex
	opts fsys.Options
	// cluster is the mount's cluster, if it shares caps with other hosts.
	cluster *cluster.Cluster
	// metrics and control are the mount's listeners, closed when it is
	// handed over, before the taking process opens its own.
	metrics net.Listener
	control *control.Server
	// handing says the mount is being handed over to another process
	// (from its state's export until the other process's verdict), and
	// handed that it has been.
	handing, handed atomic.Bool
	// changes is held shared by each change (begin), and by a handover
	// while it sets handing.
	changes sync.RWMutex
	// supervised is the mount's supervisor, if it has one.
	supervised *control.Supervised
}

// begin starts a change of the mount's groups, limits, tags or mirrors,
// to end by calling the function it returns; it refuses while the mount
// is being handed over, as the state sent would not hold the change.
func (t *target) begin() (end func(), err error) {
	t.changes.RLock()
	if t.handing.Load() || t.handed.Load() {
		t.changes.RUnlock()
		return nil, errors.New("the mount is being handed over to another sluice: try again in a moment, there")
	}
	return func() {
		t.changes.RUnlock()
		t.m.Checkpoint() // for a supervisor
	}, nil
}

// closeListeners closes the mount's cluster membership, metrics listener
// and control socket, once.
func (t *target) closeListeners() {
	t.mu.Lock()
	cl, ln, srv := t.cluster, t.metrics, t.control
	t.cluster, t.metrics, t.control = nil, nil, nil
	t.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
	if ln != nil {
		ln.Close()
	}
	if srv != nil {
		srv.Close()
	}
}

func (t *target) Status() control.Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := control.Status{
		Source: t.opts.Source, Mountpoint: t.opts.Mountpoint,
		Transport: t.m.Transport(), Backing: t.m.Backing(), ColdReads: t.m.ColdReads(), Time: time.Now(), Metrics: t.m.Engine().Metrics(),
	}
	for _, p := range t.m.Passthrough() {
		st.Passthrough = append(st.Passthrough, control.PassOpens(p))
	}
	for _, x := range t.m.InFlight() {
		st.InFlight = append(st.InFlight, control.InFlight(x))
	}
	if t.cluster != nil {
		cs := t.cluster.Status()
		st.Cluster = &cs
	}
	if t.supervised != nil {
		sv := *t.supervised
		st.Supervised = &sv
	}
	if ms := t.m.Mirrors(); ms != nil {
		st.Source = strings.Join(ms.Dirs(), ":") // mirrors added since the mount too
		st.ReadPolicy, st.Mirrors, st.LastResync = ms.Policy(), ms.Stats(), ms.LastResync()
	}
	return st
}

func (t *target) Tag(pid int32, name string) error {
	end, err := t.begin()
	if err != nil {
		return err
	}
	defer end()
	return t.m.Tag(pid, name)
}

func (t *target) Resync(rate int64) error {
	end, err := t.begin()
	if err != nil {
		return err
	}
	defer end()
	ms := t.m.Mirrors()
	if ms == nil {
		return errors.New("this mount serves no mirror set: nothing to resync")
	}
	return ms.StartResync(rate)
}

func (t *target) Set(spec string) (string, error) {
	end, err := t.begin()
	if err != nil {
		return "", err
	}
	defer end()
	if name, ok := strings.CutPrefix(spec, "read-policy="); ok {
		ms := t.m.Mirrors()
		if ms == nil {
			return "", fmt.Errorf("%q: this mount serves no mirror set, so it has no read policy", spec)
		}
		return "", ms.SetPolicy(name)
	}
	l, err := group.ParseLimit(spec)
	if err != nil {
		return "", fmt.Errorf("%q: %v", spec, err)
	}
	if err := t.m.SetLimit(l); err != nil {
		return "", fmt.Errorf("%q: %v", spec, err)
	}
	if !t.reachable(l.Group) {
		return fmt.Sprintf("no caller is classified into %q or below it: the mount has no --group rule for it (callers not matched by any rule are in %q)", l.Group, group.Default), nil
	}
	return "", nil
}

// reachable reports whether some caller can be charged to name: it is the
// default group, a rule's group, or an ancestor of one.
func (t *target) reachable(name string) bool {
	if name == group.Default {
		return true
	}
	for _, r := range t.opts.Rules {
		if r.Group == name || strings.HasPrefix(r.Group, name+"/") {
			return true
		}
	}
	return false
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ", ") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }
func (m *multi) Type() string       { return "strings" }

// The types of sizeFlag and onOff, as their Type methods name them.
const (
	sizeType  = "size"
	onOffType = "on|off"
)

// sizeFlag is a byte size with units.
type sizeFlag int64

func (s *sizeFlag) String() string { return group.FormatSize(int64(*s)) }
func (s *sizeFlag) Type() string   { return sizeType }
func (s *sizeFlag) Set(v string) error {
	n, err := group.ParseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

// onOff is a boolean spelled on or off.
type onOff bool

func (b *onOff) String() string {
	if *b {
		return "on"
	}
	return "off"
}
func (b *onOff) Type() string { return onOffType }
func (b *onOff) Set(v string) error {
	switch v {
	case "on":
		*b = true
	case "off":
		*b = false
	default:
		return fmt.Errorf("%q: want on or off", v)
	}
	return nil
}

// commandOptions parses a mount command line, its config file included,
// into the mount's options, with the flags as parsed (o).
func commandOptions(args []string, stderr io.Writer) (opts fsys.Options, o *mountOpts, err error) {
	fs, o := mountFlags()
	pos, err := parse(fs, args)
	if err != nil {
		return opts, o, err
	}
	opts, err = mountFromFlags(fs, o, pos, stderr)
	return opts, o, err
}

// mountFromFlags turns mount flags as parsed (fs, bound to o) and the
// positional arguments into the mount's options, reading the config file
// --config names.
func mountFromFlags(fs *pflag.FlagSet, o *mountOpts, pos []string, stderr io.Writer) (opts fsys.Options, err error) {
	var cfg *config
	if o.config != "" {
		if cfg, err = loadConfig(o.config, fs); err != nil {
			return opts, usageError{err}
		}
		if pos, err = cfg.apply(fs, o, pos); err != nil {
			return opts, usageError{err}
		}
	}
	opts, err = mountOptions(fs, o, pos, stderr)
	var ue usageError
	if cfg != nil && errors.As(err, &ue) {
		err = usageError{cfg.located(ue.error)}
	}
	return opts, err
}

// metricSource is what the metrics exporter reads of a mount.
type metricSource struct{ t *target }

func (s metricSource) Metrics() stack.Metrics { return s.t.m.Engine().Metrics() }
func (s metricSource) Mirrors() []backing.MirrorStats {
	if ms := s.t.m.Mirrors(); ms != nil {
		return ms.Stats()
	}
	return nil
}
func (s metricSource) Cluster() *cluster.Status {
	s.t.mu.Lock()
	cl := s.t.cluster
	s.t.mu.Unlock()
	if cl == nil {
		return nil
	}
	cs := cl.Status()
	return &cs
}

// mountOptions turns the parsed mount flags and positional arguments into
// the mount's options, or a usage error naming the flag.
func mountOptions(fs *pflag.FlagSet, o *mountOpts, pos []string, stderr io.Writer) (opts fsys.Options, err error) {
	opts = fsys.Options{AllowOther: o.allow, Passthrough: o.pass, Debug: o.debug, ReadPolicy: o.policy, Transport: o.transport}
	switch {
	case o.cluster != "" && o.clusterName == "":
		return opts, usagef("--cluster %s needs --cluster-name NAME: the mounts of one name share their groups' caps", cluster.Redacted(o.cluster))
	case o.cluster == "" && (o.clusterName != "" || o.clusterHost != "" || o.clusterCA != ""):
		return opts, usagef("--cluster-name, --cluster-host and --cluster-ca are of a mount in a cluster: give --cluster URL too")
	case o.cluster != "":
		if _, err := cluster.ParseURL(o.cluster); err != nil {
			return opts, usagef("--cluster %v", err)
		}
		if o.clusterCA != "" {
			if !strings.HasPrefix(o.cluster, "rediss://") {
				return opts, usagef("--cluster-ca %s: --cluster %s is not a rediss:// URL, whose server's certificate it would check", o.clusterCA, cluster.Redacted(o.cluster))
			}
			if _, err := cluster.LoadCA(o.clusterCA); err != nil {
				return opts, usagef("--cluster-ca %v", err)
			}
		}
	}
	switch o.transport {
	case fsys.TransportAuto, fsys.TransportDev:
	case fsys.TransportURing:
		if ok, why := fsys.URingOffered(); !ok {
			return opts, usagef("--transport uring: %s; or --transport auto (uring where offered, dev otherwise) or dev", why)
		}
	default:
		return opts, usagef("--transport %s: want auto, dev or uring", o.transport)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil || !slices.Contains(logLevels, strings.ToLower(o.logLevel)) {
		return opts, usagef("--log-level %s: want %s", o.logLevel, orList(logLevels))
	}
	opts.Debug = opts.Debug || level == slog.LevelDebug
	opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	switch {
	case len(o.mirrors) > 0 && len(pos) == 2:
		return opts, usagef("--mirror and SOURCE %s: a mirror set is served in place of SOURCE; give MOUNTPOINT only", pos[0])
	case len(o.mirrors) == 1:
		return opts, usagef("--mirror %s: a mirror set needs --mirror twice or more (one directory: serve it as SOURCE)", o.mirrors[0])
	case len(o.mirrors) > 0 && len(pos) != 1:
		return opts, usagef("with --mirror, want MOUNTPOINT only, got %d argument(s)", len(pos))
	case len(o.mirrors) == 0 && len(pos) != 2:
		return opts, usagef("want SOURCE and MOUNTPOINT, got %d argument(s)", len(pos))
	}
	if !slices.Contains(mirror.Names, o.policy) {
		return opts, usagef("--read-policy %s: want one of %s", o.policy, strings.Join(mirror.Names, ", "))
	}
	switch explicit := o.pass && fs.Changed("passthrough"); {
	case explicit && len(o.mirrors) > 0:
		return opts, usagef("--passthrough with --mirror: passthrough reads would bypass the read policy; drop one")
	case explicit && o.writeCache:
		return opts, usagef("--passthrough with --write-cache: the kernel passes nothing through with its write cache; drop one")
	case len(o.mirrors) > 0 || o.writeCache:
		opts.Passthrough = false
	}
	if len(o.mirrors) == 0 && fs.Changed("read-policy") {
		return opts, usagef("--read-policy %s without --mirror: only a mirror set has a read policy", o.policy)
	}
	for _, d := range o.mirrors {
		a, _ := filepath.Abs(d)
		opts.Mirrors = append(opts.Mirrors, a)
	}
	if len(o.mirrors) == 0 {
		opts.Source, _ = filepath.Abs(pos[0])
	}
	opts.Mountpoint, _ = filepath.Abs(pos[len(pos)-1])
	for _, s := range o.limits {
		l, err := group.ParseLimit(s)
		if err != nil {
			return opts, usagef("--limit %q: %v", s, err)
		}
		opts.Limits = append(opts.Limits, l)
	}
	for _, s := range o.groups {
		r, err := group.ParseRule(s)
		if err != nil {
			return opts, usagef("--group %q: %v", s, err)
		}
		opts.Rules = append(opts.Rules, r)
	}
	wait, err := maxWait(o.maxWait)
	if err != nil {
		return opts, err
	}
	opts.Options.Options = stack.Options{
		MaxIO: int64(o.maxIO), Readahead: int64(o.ra), ReadaheadBudget: bool(o.budget),
		CacheBytes: int64(o.cache), Burst: o.burst, MaxWait: wait,
	}
	if err := opts.Validate(); err != nil {
		var oe *stack.OptionError
		if errors.As(err, &oe) {
			return opts, usagef("%s %s: want %s", optionFlags[oe.Field], oe.Value, oe.Want)
		}
		return opts, usagef("%v", err)
	}
	if o.maxOpen < 16 {
		return opts, usagef("--max-open %d: want at least 16", o.maxOpen)
	}
	opts.MaxOpen = o.maxOpen
	if o.groupOpen < 0 {
		return opts, usagef("--group-max-open %d: want 0 (a quarter of the descriptor limit) or more", o.groupOpen)
	}
	opts.GroupMaxOpen = o.groupOpen
	if o.metricsTimeout <= 0 {
		return opts, usagef("--metrics-timeout %v: want a duration above 0, such as 10s", o.metricsTimeout)
	}
	if o.metricsConns < 1 {
		return opts, usagef("--metrics-max-conns %d: want at least 1", o.metricsConns)
	}
	cm, ok := stack.ParseCacheMode(o.cacheMode)
	if !ok || o.cacheMode == "" {
		return opts, usagef("--cache-mode %s: want %s", o.cacheMode, orList(cacheModes))
	}
	opts.CacheMode = cm
	opts.WriteCache = o.writeCache
	opts.ReadOnly, opts.NoExec = o.readOnly, o.noExec
	switch o.mapDirty {
	case "auto":
		opts.MapDirty = 0
	case "kernel":
		opts.MapDirty = -1
	default:
		n, err := group.ParseSize(o.mapDirty)
		if err != nil || n < 4096 {
			return opts, usagef("--map-dirty %s: want a size of at least 4KiB, auto or kernel", o.mapDirty)
		}
		opts.MapDirty = n
	}
	if len(opts.Rules) > 0 && !opts.AllowOther {
		// Without allow_other the kernel keeps every user but the mounting
		// one out, and rules about other callers could never match.
		opts.AllowOther = true
		opts.Logger.Info("--group rules imply --allow-other (other users' access is still checked: default_permissions)")
	}
	return opts, nil
}

// spareProcs gives the Go runtime as many more Ps as the FUSE server keeps
// readers, unless GOMAXPROCS is set. go-fuse keeps up to GOMAXPROCS
// goroutines (at least 2, at most 16, fixed when the server starts) blocked
// in read(2) on /dev/fuse, and a goroutine in a system call holds its P.
// With every P held so, the runtime's monitor takes them back within 20 µs
// and hands them round with futex wake-ups, which on a virtual machine
// cost more than the request: a throttled 4 KiB read at 1 MiB/s (one fio
// job, direct mode) cost 600-840 µs of sluice's CPU with 2 Ps on 2 cores,
// and 250-430 µs with 4.
func spareProcs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	n := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(n + min(max(n, 2), 16))
}
