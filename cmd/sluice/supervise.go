package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sluice/control"
	"sluice/fsys"
)

// A supervised mount (sluice mount --supervise): this process, the
// supervisor, runs the same command line again as its child, which mounts
// and serves, and tells the supervisor every change of the mount's state
// over a socket (fsys.Journal). Should the child die (killed, or a
// panic), the supervisor starts another on the same FUSE connection, with
// the record of the state and the descriptors it holds: the mount never
// goes away, and its applications wait.

// The environment that makes a sluice mount the supervisor's child: the
// descriptor of its end of the journal, and after a crash, of the socket
// the record comes on.
const (
	journalEnv = "SLUICE_JOURNAL_FD"
	arenaEnv   = "SLUICE_ARENA_FD"
	refsEnv    = "SLUICE_REFS_FD"
	recoverEnv = "SLUICE_RECOVER_FD"
)

// crashLoop: this many new processes in a row die before they serve,
// and the supervisor gives up (the mount then ends: its applications get
// ENOTCONN).
const crashLoop = 5

// recoverState is what the supervisor hands a new child after a crash.
type recoverState struct {
	FS *fsys.HandoverState `json:"fs"`
	// Pid is the child that died.
	Pid int `json:"pid"`
	// Crashes are the children that died so far, the last at LastCrash.
	Crashes   int       `json:"crashes"`
	LastCrash time.Time `json:"last_crash"`
}

// checkSupervise refuses what a supervised mount cannot be yet.
func checkSupervise(opts fsys.Options) error {
	switch {
	case len(opts.Mirrors) > 0:
		return usagef("--supervise with --mirror: a mirror set cannot be supervised yet")
	case opts.Transport == fsys.TransportURing:
		return usagef("--supervise with --transport %s: a supervised mount is served over /dev/fuse (--transport %s)", fsys.TransportURing, fsys.TransportDev)
	}
	return nil
}

// supervised says whether this process is a supervisor's child.
func supervised() bool { return os.Getenv(journalEnv) != "" }

// inheritedFd returns the descriptor the environment variable name gives.
func inheritedFd(name string) (int, error) {
	v := os.Getenv(name)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return -1, fmt.Errorf("%s=%q: not a descriptor this process was given", name, v)
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// supervise runs this command line again as a child that serves the mount
// of opts, starts another on the same connection whenever it dies, and
// returns when the mount ends (the child exits 0) or cannot be kept.
func supervise(opts fsys.Options, log *slog.Logger) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--supervise: the binary to run: %v", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	rec := fsys.NewRecord()
	defer rec.Close()
	// The requests being served live here (fsys.ArenaBytes), and the
	// objects' reference counts, which the record reads.
	arena, err := memfd("sluice-requests", fsys.ArenaBytes())
	if err != nil {
		return fmt.Errorf("--supervise: the requests' memory: %v", err)
	}
	defer arena.Close()
	refs, err := memfd("sluice-refs", fsys.RefsBytes())
	if err != nil {
		return fmt.Errorf("--supervise: the reference counts' memory: %v", err)
	}
	defer refs.Close()
	rfd := int(refs.Fd())
	if err := rec.MapRefs(rfd); err != nil {
		return fmt.Errorf("--supervise: %v", err)
	}
	var (
		failed   int // new processes in a row that died before they served
		crashes  int // children that died
		last     time.Time
		stopping bool
		dead     int // the child that died, for the next one's log
		ready    bool
	)
	for {
		child, journal, err := startChild(exe, rec, []*os.File{arena, refs}, recoverState{Pid: dead, Crashes: crashes, LastCrash: last})
		if err != nil {
			if !rec.Started() {
				return err
			}
			log.Error("supervisor: starting a new sluice", "err", err)
			return stopDead(opts, log, err)
		}
		log.Debug("supervisor: serving through", "pid", child.Process.Pid)
		started := make(chan struct{}, 1)
		read := make(chan journalRead, 1)
		go func() {
			n, err := readJournal(journal, rec, started)
			read <- journalRead{n, err}
		}()
		exited := make(chan error, 1)
		go func() { exited <- child.Wait() }()
		var werr error
	wait:
		for {
			select {
			case <-started:
				if !ready {
					ready = true
					notify(log, "READY=1")
				}
			case sig := <-sigs:
				switch sig {
				case syscall.SIGINT, syscall.SIGTERM:
					stopping = true
					notify(log, "STOPPING=1")
					child.Process.Signal(sig)
				case syscall.SIGUSR2:
					// An upgrade: the binary on disk serves on, from the
					// record, as after a crash.
					log.Info("supervisor: upgrade: restarting sluice from the binary on disk", "pid", child.Process.Pid, "binary", exe)
					child.Process.Signal(syscall.SIGKILL)
				default:
					child.Process.Signal(sig)
				}
			case werr = <-exited:
				break wait
			}
		}
		// Everything the child sent before it died is queued: read it.
		r := <-read
		if r.err != nil {
			log.Error("supervisor: the journal", "err", r.err)
		}
		journal.Close()
		code := exitCode(werr)
		switch {
		case code == 0:
			return nil // the mount ended
		case !rec.Started():
			// The child said why; its status is the supervisor's.
			return exitError{fmt.Errorf("the mount's process (pid %d) exited with status %d before the mount was up", child.Process.Pid, code), max(code, 1)}
		case stopping:
			return stopDead(opts, log, fmt.Errorf("sluice (pid %d) died while stopping: %v", child.Process.Pid, werr))
		}
		if r.n > 0 {
			failed = 0
		} else if failed++; failed >= crashLoop {
			return stopDead(opts, log, fmt.Errorf("%d new sluices in a row died before they served, the last (pid %d): %v", failed, child.Process.Pid, werr))
		}
		dead, crashes, last = child.Process.Pid, crashes+1, time.Now()
		log.Warn("supervisor: sluice died; a new one takes the mount over", "pid", dead, "exit", werr.Error(),
			"open_files", rec.Files(), "open_dirs", rec.Dirs())
	}
}

// memfd makes a memfd of size bytes (holes until written).
func memfd(name string, size int64) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// exitCode is the exit status of a child that ended with err (-1 when
// killed by a signal).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// stopDead ends a mount no child serves: it unmounts it (lazily: the
// mount goes once its last open file closes) and says why.
func stopDead(opts fsys.Options, log *slog.Logger, why error) error {
	log.Error("supervisor: the mount ends", "mountpoint", opts.Mountpoint, "err", why)
	if err := unix.Unmount(opts.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		log.Warn("supervisor: unmount", "err", err)
	}
	return fmt.Errorf("--supervise: %v", why)
}

// startChild starts this command line again as a child, with the journal's
// socket, and after a crash (a record started) the record on another.
func startChild(exe string, rec *fsys.Record, mem []*os.File, rs recoverState) (*exec.Cmd, *os.File, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	journal, theirs := os.NewFile(uintptr(pair[0]), "journal"), os.NewFile(uintptr(pair[1]), "journal")
	defer theirs.Close()
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The supervisor is the service's main process, and says when the
	// mount is ready.
	env := []string{journalEnv + "=3", arenaEnv + "=4", refsEnv + "=5"}
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		switch k {
		case "NOTIFY_SOCKET", journalEnv, arenaEnv, refsEnv, recoverEnv:
		default:
			env = append(env, e)
		}
	}
	cmd.ExtraFiles = append([]*os.File{theirs}, mem...)
	// Its own process group: a Ctrl-C reaches the supervisor, which
	// passes it on once. Should the supervisor die, the child serves on,
	// no longer kept for a crash.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var handing *net.UnixConn
	if rec.Started() {
		spair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			journal.Close()
			return nil, nil, err
		}
		mine, rtheirs := os.NewFile(uintptr(spair[0]), "record"), os.NewFile(uintptr(spair[1]), "record")
		defer rtheirs.Close()
		c, err := net.FileConn(mine)
		mine.Close()
		if err != nil {
			journal.Close()
			return nil, nil, err
		}
		handing = c.(*net.UnixConn)
		cmd.ExtraFiles = append(cmd.ExtraFiles, rtheirs)
		env = append(env, recoverEnv+"=6")
	}
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		journal.Close()
		if handing != nil {
			handing.Close()
		}
		return nil, nil, err
	}
	if handing != nil {
		defer handing.Close()
		st, fds, err := rec.State()
		var b []byte
		if err == nil {
			rs.FS = st
			b, err = json.Marshal(rs)
		}
		if err == nil {
			handing.SetDeadline(time.Now().Add(control.HandoverTimeout))
			err = control.SendState(handing, b, fds)
		}
		if err != nil {
			// The child reads nothing, and exits: counted as a crash.
			cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	return cmd, journal, nil
}

// journalNap is how long the supervisor lets journal messages gather
// once it has read them all.
const journalNap = 10 * time.Millisecond

// journalRead is what readJournal read of one child: how many messages,
// and the first error.
type journalRead struct {
	n   int
	err error
}

// readJournal applies the journal's messages to rec until the child's end
// closes, and returns how many it read; started gets a token when the
// mount says it is ready.
func readJournal(f *os.File, rec *fsys.Record, started chan<- struct{}) (int, error) {
	fd := int(f.Fd())
	buf := make([]byte, 4<<20)
	oob := make([]byte, unix.CmsgSpace(4*253))
	var first error
	count, drain := 0, 0
	for {
		n, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, drain)
		if errors.Is(err, unix.EAGAIN) {
			// All read: let changes gather in the socket for a while
			// rather than wake for each, which would take a core from
			// the requests that make them.
			time.Sleep(journalNap)
			drain = 0
			continue
		}
		drain = unix.MSG_DONTWAIT
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return count, errors.Join(first, err)
		}
		var fds []int
		if oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range msgs {
					if r, err := unix.ParseUnixRights(&m); err == nil {
						fds = append(fds, r...)
					}
				}
			}
		}
		if n == 0 && oobn == 0 {
			return count, first // the child's end closed
		}
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 && first == nil {
			first = fmt.Errorf("a journal message was cut short (%d bytes)", n)
		}
		count++
		was := rec.Ready()
		if err := rec.Apply(buf[:n], fds); err != nil && first == nil {
			first = err
		}
		if !was && rec.Ready() {
			started <- struct{}{}
		}
	}
}

// journalOf makes the journal of a supervisor's child.
func journalOf(log *slog.Logger) (*fsys.Journal, error) {
	fd, err := inheritedFd(journalEnv)
	if err != nil {
		return nil, err
	}
	afd, err := inheritedFd(arenaEnv)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	rfd, err := inheritedFd(refsEnv)
	if err != nil {
		unix.Close(fd)
		unix.Close(afd)
		return nil, err
	}
	return fsys.NewJournal(fd, afd, rfd, func(err error) { log.Warn("supervised mount", "err", err) })
}

// recovering is a supervisor's child taking the mount over after a crash.
type recovering struct {
	st  recoverState
	fds []int
}

// startRecovering reads the record the supervisor sends, if this child
// starts after a crash; nil if it starts the mount.
func startRecovering() (*recovering, error) {
	if os.Getenv(recoverEnv) == "" {
		return nil, nil
	}
	fd, err := inheritedFd(recoverEnv)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "record")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	uc.SetDeadline(time.Now().Add(control.HandoverTimeout))
	b, fds, err := control.ReceiveState(uc)
	if err != nil {
		return nil, fmt.Errorf("the supervisor's record: %v", err)
	}
	r := &recovering{fds: fds}
	if err := json.Unmarshal(b, &r.st); err != nil || r.st.FS == nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("the supervisor's record does not parse: %v", err)
	}
	return r, nil
}

// take serves the mount of opts from the record.
func (r *recovering) take(opts fsys.Options) (*fsys.FS, error) {
	// The limits in force come with the record; before the first
	// checkpoint it has none, and those of the command line hold.
	m, err := fsys.Adopt(opts, r.st.FS, r.fds, r.st.FS.Limits == nil)
	if err != nil {
		return nil, fmt.Errorf("--supervise: taking the mount over after pid %d died: %v", r.st.Pid, err)
	}
	m.Serve()
	return m, nil
}
