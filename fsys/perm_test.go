package fsys

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"sluice/group"
)

// init serves the helpers of this file before TestMain runs: they need more
// arguments than TestMain's helpers take.
func init() {
	if len(os.Args) != 3 {
		return
	}
	switch os.Getenv("SLUICE_FSYS_HELPER") {
	case "execas":
		os.Exit(execAs(os.Args[2]))
	case "umaskmk":
		os.Exit(umaskMake(os.Args[2]))
	}
}

// ucred is a user as the kernel sees it: file system uid and gid and the
// supplementary groups.
type ucred struct {
	uid, gid int
	groups   []int
}

func (c ucred) String() string {
	s := strconv.Itoa(c.uid)
	if len(c.groups) > 0 {
		s += fmt.Sprintf("(+%v)", c.groups)
	}
	return s
}

// spec renders c for a helper's command line: "uid:gid:g1,g2".
func (c ucred) spec() string {
	var gs []string
	for _, g := range c.groups {
		gs = append(gs, strconv.Itoa(g))
	}
	return fmt.Sprintf("%d:%d:%s", c.uid, c.gid, strings.Join(gs, ","))
}

func parseCred(s string) (ucred, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return ucred{}, fmt.Errorf("bad credential %q", s)
	}
	var c ucred
	var err error
	if c.uid, err = strconv.Atoi(parts[0]); err != nil {
		return c, err
	}
	if c.gid, err = strconv.Atoi(parts[1]); err != nil {
		return c, err
	}
	for _, g := range strings.Split(parts[2], ",") {
		if g == "" {
			continue
		}
		n, err := strconv.Atoi(g)
		if err != nil {
			return c, err
		}
		c.groups = append(c.groups, n)
	}
	return c, nil
}

// runAsGroups runs fn on a fresh OS thread whose file system uid and gid are
// uid and gid, whose supplementary groups are exactly groups and which holds
// no capabilities: the kernel and FUSE see an ordinary user. The thread ends
// with fn (it is never unlocked). fn must not call t.Fatal.
func runAsGroups(uid, gid int, groups []int, fn func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		if err := becomeUser(uid, gid, groups); err != nil {
			errc <- err
			return
		}
		fn()
		errc <- nil
	}()
	return <-errc
}

// becomeUser sets the calling thread's credentials with per-thread system
// calls and checks them in /proc/thread-self/status.
func becomeUser(uid, gid int, groups []int) error {
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups %v: %w", groups, err)
	}
	if err := unix.Setfsgid(gid); err != nil {
		return fmt.Errorf("setfsgid %d: %w", gid, err)
	}
	if err := unix.Setfsuid(uid); err != nil {
		return fmt.Errorf("setfsuid %d: %w", uid, err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return err
	}
	want := map[string]string{
		"Uid":    "fs=" + strconv.Itoa(uid),
		"Gid":    "fs=" + strconv.Itoa(gid),
		"Groups": fmt.Sprint(groups),
		"CapEff": "0000000000000000",
	}
	for _, line := range strings.Split(string(b), "\n") {
		key, val, _ := strings.Cut(line, ":")
		f := strings.Fields(val)
		var got string
		switch key {
		case "Uid", "Gid":
			if len(f) == 4 {
				got = "fs=" + f[3]
			}
		case "Groups":
			got = fmt.Sprint(groupsOf(f))
		case "CapEff":
			if len(f) == 1 {
				got = f[0]
			}
		default:
			continue
		}
		if got != want[key] {
			return fmt.Errorf("thread credentials: %s is %q, want %q", key, got, want[key])
		}
		delete(want, key)
	}
	if len(want) != 0 {
		return fmt.Errorf("thread credentials: %v missing from /proc/thread-self/status", want)
	}
	return nil
}

func groupsOf(f []string) []int {
	gs := []int{}
	for _, s := range f {
		n, _ := strconv.Atoi(s)
		gs = append(gs, n)
	}
	if len(gs) == 0 {
		return nil
	}
	return gs
}

// as runs fn as c and fails the test when the credentials cannot be set.
func asUser(t *testing.T, c ucred, fn func()) {
	t.Helper()
	if err := runAsGroups(c.uid, c.gid, c.groups, fn); err != nil {
		t.Fatalf("becoming uid %d: %v", c.uid, err)
	}
}

// errnoStr renders an error as its errno name, "ok" for nil.
func errnoStr(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprintf("errno %d", int(e))
	}
	return err.Error()
}

// execAs is a helper process: it runs, as the user in spec, each path read
// from standard input (one per line) and prints one result per line: "ok",
// "exit N" or the errno name of the failed exec.
func execAs(spec string) int {
	c, err := parseCred(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var gs []uint32
	for _, g := range c.groups {
		gs = append(gs, uint32(g))
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<16), 1<<16)
	for sc.Scan() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, sc.Text())
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
			Uid: uint32(c.uid), Gid: uint32(c.gid), Groups: gs}}
		err := cmd.Run()
		cancel()
		var ee *exec.ExitError
		switch {
		case err == nil:
			fmt.Println("ok")
		case errors.As(err, &ee):
			fmt.Printf("exit %d\n", ee.ExitCode())
		default:
			fmt.Println(errnoStr(err))
		}
	}
	return 0
}

// helperCtx is helper with a deadline: the test binary run as one of this
// file's helpers, killed when ctx ends.
func helperCtx(ctx context.Context, what, arg string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], what, arg)
	cmd.Env = append(os.Environ(), "SLUICE_FSYS_HELPER="+what)
	return cmd
}

// execResults runs each of paths as c through the execas helper.
func execResults(t *testing.T, c ucred, paths []string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := helperCtx(ctx, "execas", c.spec())
	cmd.Stdin = strings.NewReader(strings.Join(paths, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("exec helper: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(paths) {
		t.Fatalf("exec helper answered %d lines for %d paths: %q", len(lines), len(paths), out)
	}
	return lines
}

// umaskMake is a helper process: with the umask and as the user in spec
// ("umask:uid:gid:groups"), it creates for each path read from standard input
// a file path+".f" (mode 0666) and a directory path+".d" (mode 0777), and
// prints the two results.
func umaskMake(spec string) int {
	mask, rest, _ := strings.Cut(spec, ":")
	m, err := strconv.ParseUint(mask, 8, 32)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c, err := parseCred(rest)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	syscall.Umask(int(m))
	if err := syscall.Setgroups(c.groups); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := syscall.Setgid(c.gid); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := syscall.Setuid(c.uid); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<16), 1<<16)
	for sc.Scan() {
		p := sc.Text()
		fd, err := unix.Open(p+".f", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err == nil {
			unix.Close(fd)
		}
		derr := unix.Mkdir(p+".d", 0o777)
		fmt.Println(errnoStr(err), errnoStr(derr))
	}
	return 0
}

// Fixture: a tree of files and directories of many modes and owners.

const fixtureData = "#!/bin/true\n"

var (
	u4101 = ucred{4101, 4101, nil}
	u4102 = ucred{4102, 4102, nil}
	u4103 = ucred{4103, 4103, []int{4200}}
)

type fixEntry struct {
	name     string
	dir      bool
	uid, gid int
	mode     uint32
	acl      bool // user:4102 gets rw (files) or rwx (directories) by an ACL
}

var fixModes = []uint32{0o000, 0o400, 0o200, 0o100, 0o040, 0o020, 0o004, 0o002,
	0o600, 0o640, 0o660, 0o666, 0o755, 0o777, 0o4755, 0o2755, 0o6777}

// fixture lists the tree's entries, parents before children.
func fixture(withACL bool) []fixEntry {
	var es []fixEntry
	for _, m := range fixModes {
		es = append(es, fixEntry{name: fmt.Sprintf("u1-%04o", m), uid: 4101, gid: 4101, mode: m})
	}
	for _, m := range []uint32{0o000, 0o600, 0o640, 0o644, 0o660, 0o666, 0o755, 0o6777} {
		es = append(es, fixEntry{name: fmt.Sprintf("u2-%04o", m), uid: 4102, gid: 4102, mode: m})
	}
	for _, m := range []uint32{0o000, 0o600, 0o644, 0o666, 0o755, 0o4755} {
		es = append(es, fixEntry{name: fmt.Sprintf("r-%04o", m), uid: 0, gid: 0, mode: m})
	}
	for _, m := range []uint32{0o640, 0o660, 0o2770} {
		es = append(es, fixEntry{name: fmt.Sprintf("g-%04o", m), uid: 4101, gid: 4200, mode: m})
	}
	dirs := []fixEntry{
		{name: "d-0755-u1", uid: 4101, gid: 4101, mode: 0o755},
		{name: "d-0777-u1", uid: 4101, gid: 4101, mode: 0o777},
		{name: "d-0700-u1", uid: 4101, gid: 4101, mode: 0o700},
		{name: "d-0555-u1", uid: 4101, gid: 4101, mode: 0o555},
		{name: "d-0775-g", uid: 4101, gid: 4200, mode: 0o775},
		{name: "d-0333-u2", uid: 4102, gid: 4102, mode: 0o333},
		{name: "d-0777-r", uid: 0, gid: 0, mode: 0o777},
		{name: "sticky", uid: 0, gid: 0, mode: 0o1777},
		{name: "sgid", uid: 4101, gid: 4200, mode: 0o2775},
	}
	if withACL {
		es = append(es, fixEntry{name: "acl-0600", uid: 4101, gid: 4101, mode: 0o600, acl: true})
		dirs = append(dirs, fixEntry{name: "d-acl", uid: 4101, gid: 4101, mode: 0o755, acl: true})
	}
	for _, d := range dirs {
		d.dir = true
		es = append(es, d)
		es = append(es, fixEntry{name: d.name + "/x", uid: d.uid, gid: d.gid, mode: 0o644})
	}
	es = append(es,
		fixEntry{name: "sticky/x1", uid: 4101, gid: 4101, mode: 0o644},
		fixEntry{name: "sticky/x2", uid: 4102, gid: 4102, mode: 0o666})
	return es
}

// POSIX ACL xattr tags.
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclMask     = 0x10
	aclOther    = 0x20
)

// setACL writes an access ACL giving user 4102 perm (rw- or rwx) on top of
// mode's owner, group and other bits.
func setACL(path string, mode uint32, perm uint16) error {
	type ent struct {
		tag, perm uint16
		id        uint32
	}
	none := ^uint32(0)
	es := []ent{
		{aclUserObj, uint16(mode>>6) & 7, none},
		{aclUser, perm, 4102},
		{aclGroupObj, uint16(mode>>3) & 7, none},
		{aclMask, perm | uint16(mode>>3)&7, none},
		{aclOther, uint16(mode) & 7, none},
	}
	b := make([]byte, 4+8*len(es))
	binary.LittleEndian.PutUint32(b, 2)
	for i, e := range es {
		o := 4 + 8*i
		binary.LittleEndian.PutUint16(b[o:], e.tag)
		binary.LittleEndian.PutUint16(b[o+2:], e.perm)
		binary.LittleEndian.PutUint32(b[o+4:], e.id)
	}
	return unix.Setxattr(path, "system.posix_acl_access", b, 0)
}

// aclSupported says whether dir's file system takes POSIX ACLs.
func aclSupported(t *testing.T, dir string) bool {
	t.Helper()
	p := filepath.Join(dir, ".acl-probe")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(p)
	err := setACL(p, 0o600, 6)
	if err != nil {
		if _, lerr := exec.LookPath("setfacl"); lerr == nil {
			out, serr := exec.Command("setfacl", "-m", "u:4102:rw", p).CombinedOutput()
			if serr != nil {
				t.Logf("ACLs unsupported here: %v; setfacl: %v %s", err, serr, out)
				return false
			}
			return true
		}
		t.Logf("ACLs unsupported here: %v", err)
		return false
	}
	return true
}

// buildFixture creates the tree under root (as root, then chown and chmod).
func buildFixture(t *testing.T, root string, withACL bool) {
	t.Helper()
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range fixture(withACL) {
		p := filepath.Join(root, e.name)
		if e.dir {
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, []byte(fixtureData), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, e.uid, e.gid); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, e.mode); err != nil {
			t.Fatal(err)
		}
		if e.acl {
			perm := uint16(6)
			if e.dir {
				perm = 7
			}
			if err := setACL(p, e.mode, perm); err != nil {
				t.Fatalf("ACL on %s: %v", p, err)
			}
		}
	}
	// Directories that deny their owner writing were filled first.
	for _, e := range fixture(withACL) {
		if e.dir {
			if err := unix.Chmod(filepath.Join(root, e.name), e.mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := filepath.Join(root, "u1-0644")
	if _, err := os.Stat(p); err != nil {
		p = filepath.Join(root, "u1-0600")
	}
	for _, x := range [][2]string{{"user.y", "fixture"}, {"trusted.sluice", "hidden"}} {
		if err := unix.Lsetxattr(p, x[0], []byte(x[1]), 0); err != nil {
			t.Logf("xattr %s on %s: %v", x[0], p, err)
		}
	}
}

// state describes an object as root sees it in SOURCE: type and mode bits,
// owner, size, small contents and user.x.
func objState(p string, withData bool) string {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return errnoStr(err)
	}
	s := fmt.Sprintf("mode=%07o uid=%d gid=%d size=%d", st.Mode, st.Uid, st.Gid, st.Size)
	if !withData {
		return s
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size <= 64 {
		b, err := os.ReadFile(p)
		if err != nil {
			s += " data:" + errnoStr(err)
		} else {
			s += fmt.Sprintf(" data=%q", b)
		}
	}
	buf := make([]byte, 256)
	if n, err := unix.Lgetxattr(p, "user.x", buf); err == nil {
		s += fmt.Sprintf(" user.x=%q", buf[:n])
	}
	return s
}

// permOp is one operation of the matrix. run performs it on path p (the
// target in one of the two trees) as c and describes the outcome; inspect
// lists the paths, relative to the tree, whose state is compared after.
type permOp struct {
	name    string
	targets func(es []fixEntry) []string
	run     func(p string, c ucred) string
	inspect func(target string) []string
}

func fixFiles(es []fixEntry) []string {
	var out []string
	for _, e := range es {
		if !e.dir && !strings.Contains(e.name, "/") {
			out = append(out, e.name)
		}
	}
	return out
}

func fixDirs(es []fixEntry) []string {
	out := []string{"."}
	for _, e := range es {
		if e.dir {
			out = append(out, e.name)
		}
	}
	return out
}

func fixInner(es []fixEntry) []string {
	var out []string
	for _, e := range es {
		if strings.Contains(e.name, "/") {
			out = append(out, e.name)
		}
	}
	return out
}

func targetsOf(fs ...func([]fixEntry) []string) func([]fixEntry) []string {
	return func(es []fixEntry) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f(es)...)
		}
		return out
	}
}

func selfPath(target string) []string { return []string{target} }

func inDir(names ...string) func(string) []string {
	return func(target string) []string {
		var out []string
		for _, n := range names {
			out = append(out, filepath.Join(target, n))
		}
		return out
	}
}

func otherUID(c ucred) int {
	if c.uid == 4101 {
		return 4102
	}
	return 4101
}

func listXattr(p string) string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return errnoStr(err)
	}
	var names []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	sort.Strings(names)
	return "ok " + strings.Join(names, ",")
}

func getXattr(p, name string) string {
	buf := make([]byte, 4096)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return errnoStr(err)
	}
	return fmt.Sprintf("ok %x", buf[:n])
}

var permOps = []permOp{
	{name: "read", targets: targetsOf(fixFiles, fixInner), inspect: selfPath, run: func(p string, c ucred) string {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return errnoStr(err)
		}
		defer unix.Close(fd)
		buf := make([]byte, 256)
		n, err := unix.Read(fd, buf)
		if err != nil {
			return "read " + errnoStr(err)
		}
		return fmt.Sprintf("ok %q", buf[:n])
	}},
	{name: "write", targets: targetsOf(fixFiles, fixInner), inspect: selfPath, run: func(p string, c ucred) string {
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return errnoStr(err)
		}
		defer unix.Close(fd)
		n, err := unix.Pwrite(fd, []byte("W"), 0)
		if err != nil {
			return "write " + errnoStr(err)
		}
		return fmt.Sprintf("ok n=%d", n)
	}},
	{name: "truncate", targets: targetsOf(fixFiles, fixInner), inspect: selfPath, run: func(p string, c ucred) string {
		return errnoStr(unix.Truncate(p, 5))
	}},
	{name: "chmod 06755", targets: targetsOf(fixFiles, fixDirs), inspect: selfPath, run: func(p string, c ucred) string {
		return errnoStr(unix.Chmod(p, 0o6755))
	}},
	{name: "chown to self", targets: targetsOf(fixFiles, fixDirs), inspect: selfPath, run: func(p string, c ucred) string {
		return errnoStr(unix.Lchown(p, c.uid, -1))
	}},
	{name: "chown to other uid", targets: targetsOf(fixFiles, fixDirs), inspect: selfPath, run: func(p string, c ucred) string {
		return errnoStr(unix.Lchown(p, otherUID(c), -1))
	}},
	{name: "chgrp to own gid", targets: targetsOf(fixFiles, fixDirs), inspect: selfPath, run: func(p string, c ucred) string {
		return errnoStr(unix.Lchown(p, -1, c.gid))
	}},
	{name: "chgrp to 4200", targets: targetsOf(fixFiles, fixDirs), inspect: selfPath, run: func(p string, c ucred) string {
		return errnoStr(unix.Lchown(p, -1, 4200))
	}},
	{name: "setxattr user.x", targets: targetsOf(fixFiles, fixDirs), inspect: selfPath, run: func(p string, c ucred) string {
		return errnoStr(unix.Lsetxattr(p, "user.x", []byte("v"), 0))
	}},
	{name: "listxattr", targets: targetsOf(fixFiles, fixDirs), inspect: selfPath, run: func(p string, c ucred) string {
		return listXattr(p)
	}},
	{name: "getxattr user.y", targets: fixFiles, inspect: selfPath, run: func(p string, c ucred) string {
		return getXattr(p, "user.y")
	}},
	{name: "getxattr acl", targets: targetsOf(fixFiles, fixDirs), inspect: selfPath, run: func(p string, c ucred) string {
		return getXattr(p, "system.posix_acl_access")
	}},
	{name: "create 0640", targets: fixDirs, inspect: inDir("new"), run: func(p string, c ucred) string {
		fd, err := unix.Open(filepath.Join(p, "new"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o640)
		if err == nil {
			unix.Close(fd)
		}
		return errnoStr(err)
	}},
	{name: "create 0000", targets: fixDirs, inspect: inDir("new"), run: func(p string, c ucred) string {
		fd, err := unix.Open(filepath.Join(p, "new"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return errnoStr(err)
	}},
	{name: "create 06777", targets: fixDirs, inspect: inDir("new"), run: func(p string, c ucred) string {
		fd, err := unix.Open(filepath.Join(p, "new"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o6777)
		if err == nil {
			unix.Close(fd)
		}
		return errnoStr(err)
	}},
	{name: "mkdir 01777 02755", targets: fixDirs, inspect: inDir("n1", "n2"), run: func(p string, c ucred) string {
		return errnoStr(unix.Mkdir(filepath.Join(p, "n1"), 0o1777)) + " " +
			errnoStr(unix.Mkdir(filepath.Join(p, "n2"), 0o2755))
	}},
	{name: "mkfifo", targets: fixDirs, inspect: inDir("fifo"), run: func(p string, c ucred) string {
		return errnoStr(unix.Mknod(filepath.Join(p, "fifo"), unix.S_IFIFO|0o640, 0))
	}},
	{name: "symlink", targets: fixDirs, inspect: inDir("sl"), run: func(p string, c ucred) string {
		return errnoStr(unix.Symlink("x", filepath.Join(p, "sl")))
	}},
	{name: "unlink", targets: targetsOf(fixInner, fixFiles), inspect: selfPath, run: func(p string, c ucred) string {
		return errnoStr(unix.Unlink(p))
	}},
	{name: "rename in dir", targets: targetsOf(fixInner, fixFiles), run: func(p string, c ucred) string {
		return errnoStr(unix.Rename(p, p+".y"))
	}, inspect: func(target string) []string { return []string{target, target + ".y"} }},
	{name: "link", targets: targetsOf(fixInner, fixFiles), run: func(p string, c ucred) string {
		return errnoStr(unix.Link(p, p+".hl"))
	}, inspect: func(target string) []string { return []string{target, target + ".hl"} }},
	{name: "rmdir", targets: fixDirs, inspect: inDir("e"), run: func(p string, c ucred) string {
		return errnoStr(unix.Rmdir(filepath.Join(p, "e")))
	}},
	{name: "exec", targets: fixFiles, inspect: selfPath}, // run by the execas helper
}

// permMismatch is one line of the report.
type permMismatch struct {
	op, who, file, src, mnt string
}

func reportMismatches(t *testing.T, what string, ms []permMismatch) {
	t.Helper()
	if len(ms) == 0 {
		return
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "op\tuid\tfile\tSOURCE\tmount")
	for _, m := range ms {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.op, m.who, m.file, m.src, m.mnt)
	}
	w.Flush()
	t.Errorf("%s: %d differences between SOURCE and the mount:\n%s", what, len(ms), b.String())
}

// permMount mounts with other users allowed; limited puts every group,
// including the one uids 4101-4103 fall in, under a limit.
func permMount(t *testing.T, limited bool) (src, mnt string, f *FS) {
	t.Helper()
	opts := Options{AllowOther: true}
	if limited {
		for _, u := range []uint32{4101, 4102, 4103} {
			opts.Rules = append(opts.Rules, group.Rule{Group: "tenants", UID: new(u)})
		}
		opts.Limits = []group.LimitSpec{limit(t, "default rbps=1GiB wbps=1GiB"), limit(t, "tenants rbps=1GiB wbps=1GiB")}
	}
	return mount(t, opts)
}

// TestPermMatrix: for each user and operation, the mount answers exactly
// what SOURCE answers (errno, data read, and the resulting mode, owner and
// size of every object touched).
func TestPermMatrix(t *testing.T) {
	for _, limited := range []bool{false, true} {
		name := "unlimited"
		if limited {
			name = "limited"
		}
		t.Run(name, func(t *testing.T) {
			src, mnt, _ := permMount(t, limited)
			withACL := aclSupported(t, src)
			es := fixture(withACL)
			users := []ucred{u4101, u4102, u4103}
			type job struct {
				op   permOp
				c    ucred
				a, b string // tree names
			}
			var jobs []job
			for i, op := range permOps {
				for _, c := range users {
					a, b := fmt.Sprintf("a%02d-%d", i, c.uid), fmt.Sprintf("b%02d-%d", i, c.uid)
					buildFixture(t, filepath.Join(src, a), withACL)
					buildFixture(t, filepath.Join(src, b), withACL)
					if op.name == "rmdir" {
						for _, tree := range []string{a, b} {
							for _, d := range fixDirs(es) {
								p := filepath.Join(src, tree, d, "e")
								if err := os.Mkdir(p, 0o755); err != nil {
									t.Fatal(err)
								}
							}
						}
					}
					jobs = append(jobs, job{op, c, a, b})
				}
			}
			var ms []permMismatch
			for _, j := range jobs {
				targets := j.op.targets(es)
				var rs, rm []string
				if j.op.run == nil {
					var paths []string
					for _, tg := range targets {
						paths = append(paths, filepath.Join(src, j.a, tg), filepath.Join(mnt, j.b, tg))
					}
					res := execResults(t, j.c, paths)
					for i := range targets {
						rs, rm = append(rs, res[2*i]), append(rm, res[2*i+1])
					}
				} else {
					asUser(t, j.c, func() {
						for _, tg := range targets {
							rs = append(rs, j.op.run(filepath.Join(src, j.a, tg), j.c))
							rm = append(rm, j.op.run(filepath.Join(mnt, j.b, tg), j.c))
						}
					})
				}
				for i, tg := range targets {
					if rs[i] != rm[i] {
						ms = append(ms, permMismatch{j.op.name, j.c.String(), tg, rs[i], rm[i]})
					}
					for _, p := range j.op.inspect(tg) {
						sa := objState(filepath.Join(src, j.a, p), true)
						sb := objState(filepath.Join(src, j.b, p), true)
						if sa != sb {
							ms = append(ms, permMismatch{j.op.name, j.c.String(), p + " afterwards", sa, sb})
							continue
						}
						if j.op.name == "write" {
							continue // the kernel may keep attributes cached after a write
						}
						if sv, mv := objState(filepath.Join(src, j.b, p), false), objState(filepath.Join(mnt, j.b, p), false); sv != mv {
							ms = append(ms, permMismatch{j.op.name, j.c.String(), p + " lstat via mount", sv, mv})
						}
					}
				}
			}
			reportMismatches(t, "permission matrix", ms)
		})
	}
}

// TestPermSetidClearedOnWrite: a non-owner's write through the mount clears
// S_ISUID and S_ISGID as a write on SOURCE does.
func TestPermSetidClearedOnWrite(t *testing.T) {
	for _, limited := range []bool{false, true} {
		t.Run(fmt.Sprint("limited=", limited), func(t *testing.T) {
			src, mnt, _ := permMount(t, limited)
			for _, d := range []string{"a", "b"} {
				p := filepath.Join(src, d)
				os.WriteFile(p, []byte(fixtureData), 0o600)
				os.Chown(p, 4101, 4101)
				unix.Chmod(p, 0o6777)
			}
			var es, em error
			write := func(p string) error {
				f, err := os.OpenFile(p, os.O_WRONLY, 0)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = f.WriteAt([]byte("W"), 0)
				return err
			}
			asUser(t, u4102, func() {
				es = write(filepath.Join(src, "a"))
				em = write(filepath.Join(mnt, "b"))
			})
			if es != nil || em != nil {
				t.Fatalf("write as 4102: SOURCE %v, mount %v; want both to succeed", es, em)
			}
			var sa, sb unix.Stat_t
			unix.Lstat(filepath.Join(src, "a"), &sa)
			unix.Lstat(filepath.Join(src, "b"), &sb)
			if sa.Mode&0o6000 != 0 {
				t.Fatalf("SOURCE kept set-id bits after a non-owner's write (mode %o): this kernel does not clear them", sa.Mode)
			}
			if sb.Mode != sa.Mode {
				t.Errorf("06777 file of 4101 written by 4102: mode %07o after a write through the mount, %07o after the same write on SOURCE", sb.Mode, sa.Mode)
			}
		})
	}
}

// TestPermSetgidDir: in a setgid directory, files created through the mount
// take the directory's group and subdirectories inherit the setgid bit.
func TestPermSetgidDir(t *testing.T) {
	src, mnt, _ := permMount(t, true)
	for _, d := range []string{"a", "b"} {
		p := filepath.Join(src, d)
		os.Mkdir(p, 0o755)
		os.Chown(p, 4101, 4200)
		unix.Chmod(p, 0o2775)
	}
	asUser(t, u4103, func() {
		for _, p := range []string{filepath.Join(src, "a"), filepath.Join(mnt, "b")} {
			os.WriteFile(filepath.Join(p, "f"), nil, 0o640)
			unix.Mkdir(filepath.Join(p, "sub"), 0o755)
		}
	})
	for _, n := range []string{"f", "sub"} {
		var sa, sb unix.Stat_t
		if err := unix.Lstat(filepath.Join(src, "a", n), &sa); err != nil {
			t.Fatalf("creating %s on SOURCE as 4103: %v", n, err)
		}
		if err := unix.Lstat(filepath.Join(src, "b", n), &sb); err != nil {
			t.Errorf("creating %s through the mount as 4103: %v", n, err)
			continue
		}
		if sa.Gid != 4200 {
			t.Fatalf("SOURCE gave %s group %d in a setgid directory of group 4200", n, sa.Gid)
		}
		if sb.Uid != sa.Uid || sb.Gid != sa.Gid || sb.Mode != sa.Mode {
			t.Errorf("%s created by 4103 in a setgid dir of group 4200: through the mount %d:%d mode %07o, on SOURCE %d:%d mode %07o",
				n, sb.Uid, sb.Gid, sb.Mode, sa.Uid, sa.Gid, sa.Mode)
		}
	}
}

// TestPermCreateModes: create and mkdir through the mount keep the modes
// asked for (0000, 01777, 02755) and the caller as owner, as on SOURCE and as
// lstat through the mount shows them.
func TestPermCreateModes(t *testing.T) {
	src, mnt, _ := permMount(t, false)
	for _, d := range []string{"a", "b"} {
		p := filepath.Join(src, d)
		os.Mkdir(p, 0o755)
		os.Chown(p, 4101, 4101)
	}
	do := func(dir string) []error {
		fd, err := unix.Open(filepath.Join(dir, "f0000"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return []error{err,
			unix.Mkdir(filepath.Join(dir, "d1777"), 0o1777),
			unix.Mkdir(filepath.Join(dir, "d2755"), 0o2755)}
	}
	var es, em []error
	asUser(t, u4101, func() {
		es = do(filepath.Join(src, "a"))
		em = do(filepath.Join(mnt, "b"))
	})
	for i, n := range []string{"f0000", "d1777", "d2755"} {
		if es[i] != nil {
			t.Fatalf("%s on SOURCE: %v", n, es[i])
		}
		if em[i] != nil {
			t.Errorf("%s through the mount: %v", n, em[i])
			continue
		}
		want := objState(filepath.Join(src, "a", n), false)
		if got := objState(filepath.Join(src, "b", n), false); got != want {
			t.Errorf("%s created through the mount is on SOURCE %s; created on SOURCE directly: %s", n, got, want)
		}
		if got := objState(filepath.Join(mnt, "b", n), false); got != want {
			t.Errorf("%s created through the mount, lstat through the mount: %s; want %s", n, got, want)
		}
	}
}

// TestPermUmask: a file and a directory created through the mount get the
// mode the caller's umask gives on SOURCE, not one masked by sluice's umask.
func TestPermUmask(t *testing.T) {
	src, mnt, _ := permMount(t, false)
	for _, d := range []string{"a", "b"} {
		p := filepath.Join(src, d)
		os.Mkdir(p, 0o755)
		os.Chown(p, 4101, 4101)
	}
	for _, mask := range []string{"0", "2", "27", "77"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := helperCtx(ctx, "umaskmk", mask+":"+u4101.spec())
		a, b := filepath.Join(src, "a", "m"+mask), filepath.Join(mnt, "b", "m"+mask)
		cmd.Stdin = strings.NewReader(a + "\n" + b + "\n")
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("umask helper: %v", err)
		}
		res := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(res) != 2 || res[0] != "ok ok" {
			t.Fatalf("umask %s: helper said %q", mask, out)
		}
		if res[1] != res[0] {
			t.Errorf("umask %s: creating through the mount: %s, on SOURCE: %s", mask, res[1], res[0])
			continue
		}
		for _, sfx := range []string{".f", ".d"} {
			sa := objState(filepath.Join(src, "a", "m"+mask+sfx), false)
			sb := objState(filepath.Join(src, "b", "m"+mask+sfx), false)
			if sa != sb {
				t.Errorf("umask %s, created %s with mode 0%s: through the mount %s, on SOURCE %s",
					mask, map[string]string{".f": "file", ".d": "dir"}[sfx],
					map[string]string{".f": "666", ".d": "777"}[sfx], sb, sa)
			}
		}
	}
}

// TestPermACL: a POSIX ACL on SOURCE grants through the mount what it grants
// on SOURCE (a user named in it reads and writes, and creates in a directory).
func TestPermACL(t *testing.T) {
	src, mnt, _ := permMount(t, true)
	if !aclSupported(t, src) {
		t.Skip("skipping: SOURCE's file system takes no POSIX ACLs and setfacl is missing")
	}
	for _, d := range []string{"a", "b"} {
		p := filepath.Join(src, d)
		os.Mkdir(p, 0o755)
		os.Chown(p, 4101, 4101)
		if err := setACL(p, 0o755, 7); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(p, "f")
		os.WriteFile(f, []byte(fixtureData), 0o600)
		os.Chown(f, 4101, 4101)
		if err := setACL(f, 0o600, 6); err != nil {
			t.Fatal(err)
		}
	}
	do := func(dir string) string {
		var r []string
		b, err := os.ReadFile(filepath.Join(dir, "f"))
		r = append(r, "read "+errnoStr(err)+fmt.Sprintf(" %q", b))
		f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteAt([]byte("W"), 0)
			f.Close()
		}
		r = append(r, "write "+errnoStr(err))
		r = append(r, "create "+errnoStr(os.WriteFile(filepath.Join(dir, "new"), nil, 0o644)))
		return strings.Join(r, ", ")
	}
	var rs, rm string
	asUser(t, u4102, func() {
		rs = do(filepath.Join(src, "a"))
		rm = do(filepath.Join(mnt, "b"))
	})
	if !strings.HasPrefix(rs, "read ok") {
		t.Fatalf("ACL on SOURCE did not let 4102 read: %s", rs)
	}
	if rs != rm {
		t.Errorf("uid 4102, named rw in a file's ACL and rwx in its directory's:\n  SOURCE: %s\n  mount:  %s", rs, rm)
	}
}

// TestPermRootMode0000: a root-owned mode-0000 file is not readable by
// another user through the mount, and lstat through the mount shows 0000.
func TestPermRootMode0000(t *testing.T) {
	for _, limited := range []bool{false, true} {
		t.Run(fmt.Sprint("limited=", limited), func(t *testing.T) {
			src, mnt, _ := permMount(t, limited)
			p := filepath.Join(src, "secret")
			if err := os.WriteFile(p, []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := unix.Chmod(p, 0); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(mnt, "secret"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&0o7777 != 0 || st.Uid != 0 {
				t.Errorf("lstat through the mount: mode %04o uid %d, want 0000 uid 0", st.Mode&0o7777, st.Uid)
			}
			var b []byte
			var err error
			asUser(t, u4101, func() { b, err = os.ReadFile(filepath.Join(mnt, "secret")) })
			if !errors.Is(err, syscall.EACCES) {
				t.Errorf("uid 4101 reading a root-owned mode-0000 file through the mount: %q, %v; want EACCES", b, err)
			}
		})
	}
}
