// Package control is the control socket of a mount: `sluice stat` and
// `sluice set` reach a running mount through it. The socket lives in a
// directory only its owner can enter, and the server also checks the peer's
// credentials, so only the user who mounted (root, normally) can use it.
package control

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"sluice/backing"
	"sluice/cluster"
	"sluice/internal/mountinfo"
	"sluice/lease"
	"sluice/stack"
)

// Status is what `sluice stat` shows.
type Status struct {
	// Schema is the version of this JSON shape, StatSchema: fields may be
	// added within a version; a field removed, renamed or changed in
	// meaning makes a new one.
	Schema     int    `json:"schema"`
	Source     string `json:"source"`
	Mountpoint string `json:"mountpoint"`
	// Transport says how the kernel's requests reach the mount: "uring"
	// (FUSE-over-io_uring) or "dev" (/dev/fuse).
	Transport string `json:"transport"`
	// Backing says how backing files are read: direct (O_DIRECT), buffered,
	// mixed, or none before the first throttled read.
	Backing string `json:"backing"`
	// ColdReads counts the reads straight from a backing file that none
	// of the range was in SOURCE's page cache for, read past it with
	// O_DIRECT.
	ColdReads int64 `json:"cold_reads"`
	// Time is when the figures were taken.
	Time time.Time `json:"time"`
	// Passthrough lists, per group with any, its files open by FUSE
	// passthrough, whose reads and writes the kernel makes itself: the
	// group's counters leave them out.
	Passthrough []PassOpens `json:"passthrough,omitempty"`
	// InFlight lists, per group with any, the reads and writes the
	// mount is serving now and how long the oldest has been: one that
	// SOURCE never answers shows here, older at each look.
	InFlight []InFlight `json:"in_flight,omitempty"`
	stack.Metrics
	// ReadPolicy and Mirrors describe a mirror set; empty otherwise.
	ReadPolicy string                `json:"read_policy,omitempty"`
	Mirrors    []backing.MirrorStats `json:"mirrors,omitempty"`
	// LastResync is how the last resync ended: "ok" or its error; empty
	// before one has ended.
	LastResync string `json:"last_resync,omitempty"`
	// Cluster is the cluster whose mounts share the groups' caps, if any.
	Cluster *cluster.Status `json:"cluster,omitempty"`
	// Supervised is set for a mount kept through a crash of its process
	// (sluice mount --supervise).
	Supervised *Supervised `json:"supervised,omitempty"`
}

// Supervised is a supervised mount's supervisor and the crashes of the
// serving process it has seen the mount through.
type Supervised struct {
	Pid     int `json:"pid"`
	Crashes int `json:"crashes"`
	// LastCrash is when the last crash was seen; zero before one.
	LastCrash time.Time `json:"last_crash,omitzero"`
}

// supervisedLine is the line of stat saying the mount is supervised, ""
// when it is not.
func supervisedLine(s *Supervised) string {
	switch {
	case s == nil:
		return ""
	case s.Crashes == 0:
		return fmt.Sprintf("supervised by pid %d: no crash yet\n", s.Pid)
	case s.Crashes == 1:
		return fmt.Sprintf("supervised by pid %d: survived a crash, at %s\n", s.Pid, s.LastCrash.Format(time.RFC3339))
	}
	return fmt.Sprintf("supervised by pid %d: survived %d crashes, the last at %s\n", s.Pid, s.Crashes, s.LastCrash.Format(time.RFC3339))
}

// PassOpens is how many files of a group are open by passthrough.
type PassOpens struct {
	Group string `json:"group"`
	Opens int    `json:"opens"`
	// Limited says the group has a limit now, which these opens escape:
	// made before it, until they are opened again, or made while the
	// file was open by passthrough (the kernel takes no other open then).
	Limited bool `json:"limited"`
}

// InFlight is how many reads and writes of a group the mount is serving.
type InFlight struct {
	Group    string `json:"group"`
	Requests int    `json:"requests"`
	// OldestNs is how long the oldest has been served, in ns.
	OldestNs int64 `json:"oldest_ns"`
}

// flightLine is the line of stat about the reads and writes being
// served, "" when none is.
func flightLine(fl []InFlight) string {
	if len(fl) == 0 {
		return ""
	}
	var all []string
	for _, x := range fl {
		all = append(all, fmt.Sprintf("%s %d (oldest %.3f s)", x.Group, x.Requests, float64(x.OldestNs)/1e9))
	}
	return fmt.Sprintf("in flight: %s\n", strings.Join(all, ", "))
}

// transportLine is the line of stat naming the mount's transport, ""
// when the mount did not say (one older than the field).
func transportLine(t string) string {
	switch t {
	case "":
		return ""
	case "uring":
		return "requests by FUSE-over-io_uring (transport uring)\n"
	case "dev":
		return "requests by /dev/fuse (transport dev)\n"
	}
	return "requests by transport " + t + "\n"
}

// passLine is the line of stat about the files open by passthrough, ""
// when none is.
func passLine(opens []PassOpens) string {
	if len(opens) == 0 {
		return ""
	}
	var all, escaping []string
	total := 0
	for _, p := range opens {
		total += p.Opens
		all = append(all, fmt.Sprintf("%s %d", p.Group, p.Opens))
		if p.Limited {
			escaping = append(escaping, fmt.Sprintf("%s %d", p.Group, p.Opens))
		}
	}
	line := fmt.Sprintf("passthrough: %d open files read and written by the kernel itself, not counted below\n  %s\n", total, strings.Join(all, ", "))
	if len(escaping) > 0 {
		line += fmt.Sprintf("  of those, beyond their group's limit (limited since, or the file open by passthrough):\n  %s\n", strings.Join(escaping, ", "))
	}
	return line
}

// StatSchema is the version of Status's JSON shape (`sluice stat --json`).
const StatSchema = 1

// Target is what the server controls.
type Target interface {
	Status() Status
	// Set applies a limit spec such as "default rbps=1MiB", or a mirror
	// set's "read-policy=NAME". A non-empty note is a warning for the
	// user (the change was applied).
	Set(spec string) (note string, err error)
	// Resync starts making a mirror set's stale mirrors equal again,
	// copying at most rate bytes a second (0: no bound).
	Resync(rate int64) error
	// MirrorAdd adds directory dir (an absolute path) to a mirror set as
	// a stale mirror, and returns once it has joined, with what was done
	// for the user; a resync then makes it equal.
	MirrorAdd(dir string) (note string, err error)
	// Reload reads the mount's config file again and applies what can
	// change live; a non-empty note names what needs a remount.
	Reload() (note string, err error)
	// Tag charges process pid and its descendants to group name.
	Tag(pid int32, name string) error
}

type request struct {
	Op    string `json:"op"`
	Limit string `json:"limit,omitempty"`
	Rate  int64  `json:"rate,omitempty"`
	PID   int32  `json:"pid,omitempty"`
	Group string `json:"group,omitempty"`
	Dir   string `json:"dir,omitempty"`
}

type response struct {
	Error  string  `json:"error,omitempty"`
	Note   string  `json:"note,omitempty"`
	Status *Status `json:"status,omitempty"`
}

// Dir is the directory holding control sockets: /run/sluice for root,
// $XDG_RUNTIME_DIR/sluice or /tmp/sluice-UID for others.
func Dir() string {
	if os.Geteuid() == 0 {
		return "/run/sluice"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "sluice")
	}
	return fmt.Sprintf("/tmp/sluice-%d", os.Geteuid())
}

// MakeDir creates a directory of Dir's kind (its parent must exist) and
// checks it: a real directory, not a symlink, owned by this user,
// reachable by no one else. A directory planted by another user (say in
// /tmp) is refused, never used. The control socket and the fstab
// helper's log live in one made so.
func MakeDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("control socket directory %s: %w", dir, err)
	}
	return checkDir(dir)
}

// checkDir verifies that dir is a directory owned by this user with no
// access for others.
func checkDir(dir string) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return fmt.Errorf("control socket directory %s: %w", dir, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return fmt.Errorf("control socket directory %s is not a directory (a symlink or file is there): remove it", dir)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("control socket directory %s belongs to uid %d, not to uid %d: refusing to use it (remove it, or set XDG_RUNTIME_DIR)", dir, st.Uid, os.Geteuid())
	}
	if st.Mode&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("control socket directory %s: %w", dir, err)
		}
	}
	return nil
}

// SocketPath is the control socket of the mount at mountpoint.
func SocketPath(mountpoint string) (string, error) {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(filepath.Clean(abs)))
	return filepath.Join(Dir(), hex.EncodeToString(sum[:12])+".sock"), nil
}

// MaxConns is the most control connections a server serves at once. One
// accepted beyond it is told the server is busy and closed at once, so a
// flood of connections that send nothing costs the daemon, whose
// descriptors are also every tenant's open files, no more than MaxConns
// descriptors, each for ConnTimeout at most.
const MaxConns = 16

// ConnTimeout is the longest a control connection is served: the client
// must send its request, and the server answer it, within it.
const ConnTimeout = 10 * time.Second

// Server serves one mount's control socket.
type Server struct {
	ln   *net.UnixListener
	path string
	t    Target
	// slots holds a token per connection being served, MaxConns at most.
	slots chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Listen creates the control socket for mountpoint. A stale socket left by
// a mount that died is replaced; a live one is an error.
func Listen(mountpoint string, t Target) (*Server, error) {
	path, err := SocketPath(mountpoint)
	if err != nil {
		return nil, err
	}
	if err := MakeDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s is in use: another sluice serves %s", path, mountpoint)
	}
	os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	os.Chmod(path, 0o600)
	s := &Server{ln: ln, path: path, t: t, slots: make(chan struct{}, MaxConns)}
	go s.serve()
	return s, nil
}

// Close stops serving and removes the socket. Once: after a handover the
// path is the taking process's socket.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.ln.Close()
		os.Remove(s.path)
	})
	return s.closeErr
}

// serve accepts connections until the listener is closed. An accept
// that fails otherwise (EMFILE: the daemon's descriptors are all in
// use, by tenants' files or by a flood of connections) is tried again,
// after a pause that doubles up to a second, as net/http does: the
// socket must outlive the moment.
func (s *Server) serve() {
	var pause time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			time.Sleep(pause)
			continue
		}
		pause = 0
		select {
		case s.slots <- struct{}{}:
			go func() {
				s.handle(c)
				<-s.slots
			}()
		default:
			go busy(c)
		}
	}
}

// busy tells a client beyond MaxConns that the server is busy, without
// reading its request, and closes the connection.
func busy(c *net.UnixConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	json.NewEncoder(c).Encode(response{Error: fmt.Sprintf("busy: %d control connections are being served; try again", MaxConns)})
}

func (s *Server) handle(c *net.UnixConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(ConnTimeout))
	if err := checkPeer(c); err != nil {
		json.NewEncoder(c).Encode(response{Error: err.Error()})
		return
	}
	var req request
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		json.NewEncoder(c).Encode(response{Error: "bad request: " + err.Error()})
		return
	}
	if req.Op == "handover" {
		s.handover(c)
		return
	}
	s.respond(req, json.NewEncoder(c))
}

// answer reads one request from r and writes its one response to w.
func (s *Server) answer(r io.Reader, w io.Writer) {
	enc := json.NewEncoder(w)
	var req request
	if err := json.NewDecoder(bufio.NewReader(r)).Decode(&req); err != nil {
		enc.Encode(response{Error: "bad request: " + err.Error()})
		return
	}
	s.respond(req, enc)
}

// respond answers request req on enc.
func (s *Server) respond(req request, enc *json.Encoder) {
	switch req.Op {
	case "stat":
		st := s.t.Status()
		st.Schema = StatSchema
		enc.Encode(response{Status: &st})
	case "set":
		note, err := s.t.Set(req.Limit)
		if err != nil {
			enc.Encode(response{Error: err.Error()})
			return
		}
		enc.Encode(response{Note: note})
	case "tag":
		if err := s.t.Tag(req.PID, req.Group); err != nil {
			enc.Encode(response{Error: err.Error()})
			return
		}
		enc.Encode(response{})
	case "reload":
		note, err := s.t.Reload()
		if err != nil {
			enc.Encode(response{Error: err.Error()})
			return
		}
		enc.Encode(response{Note: note})
	case "resync":
		if err := s.t.Resync(req.Rate); err != nil {
			enc.Encode(response{Error: err.Error()})
			return
		}
		enc.Encode(response{})
	case "mirror-add":
		note, err := s.t.MirrorAdd(req.Dir)
		if err != nil {
			enc.Encode(response{Error: err.Error()})
			return
		}
		enc.Encode(response{Note: note})
	default:
		enc.Encode(response{Error: fmt.Sprintf("unknown operation %q", req.Op)})
	}
}

// checkPeer admits only the server's own user.
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if cerr != nil {
		return cerr
	}
	if int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("permission denied: uid %d may not control this mount", cred.Uid)
	}
	return nil
}

// whyNoMount says why no server answered at socket path for mountpoint:
// what is there instead, a sluice mount of another user's, or one whose
// server is gone.
func whyNoMount(mountpoint, path string) string {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return err.Error()
	}
	_, serr := os.Stat(abs)
	switch {
	case errors.Is(serr, syscall.ENOTCONN):
		return "a FUSE mount whose server is gone (sluice mount --unmount-dead clears it)"
	case errors.Is(serr, os.ErrNotExist):
		return serr.Error()
	}
	// Another error (EACCES: a FUSE mount of another user's, made
	// without allow_other) leaves the mount table to tell.
	fstype, uid, ok := mountAt(filepath.Clean(abs))
	switch {
	case !ok && serr != nil:
		return serr.Error()
	case !ok:
		return "not a mount point, a plain directory"
	case fstype != "fuse.sluice":
		return fmt.Sprintf("a %s file system, not a sluice mount", fstype)
	case uid >= 0 && uid != os.Geteuid():
		return fmt.Sprintf("a sluice mount of uid %d: only that user may ask (run as it, normally root)", uid)
	}
	return fmt.Sprintf("a sluice mount whose control socket %s does not answer", path)
}

// mountAt returns the type and the mounting user (user_id=, -1 when not
// given) of the file system mounted last at dir.
func mountAt(dir string) (fstype string, uid int, ok bool) {
	m, ok, _ := mountinfo.At(dir)
	uid = -1
	for _, o := range m.Super {
		if v, found := strings.CutPrefix(o, "user_id="); found {
			fmt.Sscan(v, &uid)
		}
	}
	return m.FSType, uid, ok
}

// ErrNoMount means no sluice serves the mountpoint.
var ErrNoMount = errors.New("no sluice mount")

// dial connects to the control socket of the mount at mountpoint.
func dial(mountpoint string) (*net.UnixConn, error) {
	path, err := SocketPath(mountpoint)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(filepath.Dir(path)); err == nil {
		// Never talk to a socket in a directory another user controls.
		if err := checkDir(filepath.Dir(path)); err != nil {
			return nil, err
		}
	}
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w at %s: %s", ErrNoMount, mountpoint, whyNoMount(mountpoint, path))
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("control socket %s: permission denied (run as the user who mounted, normally root)", path)
		}
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

func call(mountpoint string, req request) (response, error) {
	c, err := dial(mountpoint)
	if err != nil {
		return response{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		// A server too busy to read the request says so and closes.
		var resp response
		if json.NewDecoder(c).Decode(&resp) == nil && resp.Error != "" {
			return resp, errors.New(resp.Error)
		}
		return response{}, err
	}
	var resp response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return response{}, fmt.Errorf("control socket of %s: %w", mountpoint, err)
	}
	if resp.Error != "" {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// Stat asks the mount at mountpoint for its status.
func Stat(mountpoint string) (Status, error) {
	resp, err := call(mountpoint, request{Op: "stat"})
	if err != nil {
		return Status{}, err
	}
	if resp.Status == nil {
		return Status{}, errors.New("empty status")
	}
	return *resp.Status, nil
}

// Set asks the mount at mountpoint to apply a limit spec. It returns the
// mount's warning, if any, about a change it applied.
func Set(mountpoint, spec string) (note string, err error) {
	resp, err := call(mountpoint, request{Op: "set", Limit: spec})
	return resp.Note, err
}

// Tag asks the mount at mountpoint to charge process pid and its
// descendants to group name.
func Tag(mountpoint string, pid int32, name string) error {
	_, err := call(mountpoint, request{Op: "tag", PID: pid, Group: name})
	return err
}

// Reload asks the mount at mountpoint to read its config file again. It
// returns the mount's note on what needs a remount, if anything.
func Reload(mountpoint string) (note string, err error) {
	resp, err := call(mountpoint, request{Op: "reload"})
	return resp.Note, err
}

// Resync asks the mount at mountpoint to start resyncing its stale
// mirrors at most rate bytes a second (0: no bound).
func Resync(mountpoint string, rate int64) error {
	_, err := call(mountpoint, request{Op: "resync", Rate: rate})
	return err
}

// MirrorAdd asks the mirror set served at mountpoint to take directory
// dir (an absolute path) as a new mirror, stale until a resync; it
// returns once dir has joined, with what the mount did.
func MirrorAdd(mountpoint, dir string) (note string, err error) {
	resp, err := call(mountpoint, request{Op: "mirror-add", Dir: dir})
	return resp.Note, err
}

// String renders the status as `sluice stat` prints it.
func (s Status) String() string { return s.Format(false) }

// Format renders the status for a person, sizes and counts rounded, or
// every figure exact when exact is set (stack.Metrics.Format).
func (s Status) Format(exact bool) string {
	size, count := stack.Units(exact)
	out := fmt.Sprintf("%s on %s at %s\n%s%sbacking files read %s; %s reads past SOURCE's page cache\n%s%s%s",
		s.Source, s.Mountpoint, s.Time.Format(time.RFC3339), transportLine(s.Transport), supervisedLine(s.Supervised), s.Backing, count(s.ColdReads), passLine(s.Passthrough),
		flightLine(s.InFlight), s.Metrics.Format(exact))
	if s.Cluster != nil {
		out += clusterLines(s.Cluster, exact)
	}
	if len(s.Mirrors) == 0 {
		return out
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "mirror\tstate\treads\tbytes\tin flight\tlatency\terrors\thedged\t\n")
	for _, m := range s.Mirrors {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t\n", m.Dir, m.State, count(m.Reads), size(m.Bytes), m.Inflight,
			time.Duration(m.Latency).Round(time.Microsecond), m.Errors, m.Hedged)
	}
	tw.Flush()
	out = fmt.Sprintf("%s\nmirrors (read policy %s):\n%s", out, s.ReadPolicy, b.String())
	if s.LastResync != "" {
		out += "last resync: " + s.LastResync + "\n"
	}
	return out
}

// clusterLines renders the cluster's state: the server and its round
// trips, then per shared cap this host's rate, its use and every host's.
func clusterLines(c *cluster.Status, exact bool) string {
	size, count := stack.Units(exact)
	var b strings.Builder
	state := "leasing"
	if !c.Answered {
		state = "no answer (" + c.LastErr + "): caps held at their leases to their end, then at the cap over the hosts seen"
	}
	fmt.Fprintf(&b, "cluster %s as %s, Redis %s: %s\n", c.Name, c.Host, c.URL, state)
	fmt.Fprintf(&b, "  %d hosts seen in the last minute; %s round trips (%.1f a second), %d failed; round trip %s, at most %s\n",
		c.Seen, count(c.Trips), c.TripsPerSec, c.Failures, time.Duration(c.RTTUs)*time.Microsecond, time.Duration(c.RTTMaxUs)*time.Microsecond)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  group\tcap\tshared\there\tused here\tused by all\thosts\t\n")
	for _, x := range c.Caps {
		unit := func(v int64) string { return count(v) + "/s" }
		if strings.HasSuffix(x.Key, "bps") {
			unit = func(v int64) string { return size(v) + "/s" }
		}
		here := unit(x.Rate)
		if !x.Leased {
			here += " (fallback)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", x.Group, x.Key, unit(x.Shared), here, unit(x.Use), unit(x.Total), x.Holders)
	}
	tw.Flush()
	for _, x := range c.Caps {
		if x.Key == lease.DevKey {
			b.WriteString("  dev: a group's part of the device the hosts share by weight, in 4 KiB random reads a second\n")
			break
		}
	}
	return b.String()
}
