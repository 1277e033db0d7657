package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sluice/control"
)

// mount(8) runs /sbin/mount.fuse.sluice for a line of /etc/fstab such as
//
//	/srv/data  /mnt/data  fuse.sluice  config=/etc/sluice/data.toml,nofail  0 0
//
// as `mount.fuse.sluice SOURCE MOUNTPOINT [-n] [-s] [-v] [-f] -o OPTIONS`.
// sluice installed under that name (a link) turns the options into mount
// flags (config=FILE is --config FILE, any mount flag by its name, with _
// for -; ro and noexec are --read-only and --noexec; the other generic
// options mount(8) passes along are ignored), checks
// them as the command line would, starts `sluice mount` in the background
// and returns once the mount serves, or with its error.

const fstabHelp = `Usage: mount.fuse.sluice SOURCE MOUNTPOINT [-o OPTIONS]

sluice installed as /sbin/mount.fuse.sluice (a link to the binary) mounts
/etc/fstab lines of type fuse.sluice:
  /srv/data  /mnt/data  fuse.sluice  config=/etc/sluice/data.toml,nofail  0 0
OPTIONS are mount flags by name (config=FILE, cache-mode=kernel, limit=...
as on the command line, allow_other), the mount flags ro (--read-only) and
noexec (--noexec), and the generic options mount passes along (defaults, rw,
nofail, _netdev, noauto, x-systemd.*...), which are ignored. The mount is
always nosuid and nodev (those options are accepted; suid and dev are
refused). A limit is limit=GROUP\040KEY=VALUE (\040 is fstab's space) or
limit=GROUP:KEY=VALUE:KEY=VALUE, e.g. limit=default:rbps=10MiB:wbps=5MiB.
SOURCE "none" or "-" leaves the source to the config file. The mount runs
in the background; its log goes to /run/sluice/mount.NAME.log.
`

// genericOptions are the mount(8) options a FUSE helper receives and that
// mean nothing to sluice, or are always in force (nosuid, nodev).
var genericOptions = map[string]bool{
	"defaults": true, "auto": true, "noauto": true, "nofail": true, "_netdev": true,
	"user": true, "nouser": true, "users": true, "owner": true, "group": true, "nosuid": true,
	"nodev": true, "async": true, "atime": true,
	"noatime": true, "relatime": true, "strictatime": true, "nodiratime": true, "diratime": true,
}

// flagOptions are the mount(8) options that are sluice mount flags under
// another name; a later option wins, as with mount(8).
var flagOptions = map[string]string{
	"ro": "--read-only", "rw": "--read-only=false",
	"noexec": "--noexec", "exec": "--noexec=false",
}

// refusedOptions are the options an fstab line may not give, and why.
var refusedOptions = map[string]string{
	"suid":         "a sluice mount is always nosuid (as FUSE mounts are): set-user-ID bits are not honoured",
	"dev":          "a sluice mount is always nodev (as FUSE mounts are): device files are not opened",
	"unmount-dead": "--unmount-dead mounts nothing (the service runs it before it mounts)",
}

// fstabLimit turns the spelling limit=GROUP:KEY=VALUE:... into the
// command line's "GROUP KEY=VALUE ..."; no group name or limit holds ':'.
func fstabLimit(value string) string {
	if strings.Contains(value, " ") {
		return value
	}
	return strings.ReplaceAll(value, ":", " ")
}

// fstabArgs turns a mount helper's arguments into `sluice mount` ones;
// fake is true for mount -f (check, mount nothing).
func fstabArgs(args []string) (mount []string, fake bool, err error) {
	var pos []string
	fs, _ := mountFlags()
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" && i+1 < len(args):
			i++
			for _, o := range strings.Split(args[i], ",") {
				if o == "" {
					continue
				}
				key, value, hasValue := strings.Cut(o, "=")
				if genericOptions[key] || strings.HasPrefix(key, "x-") || key == "comment" {
					continue
				}
				if flag, ok := flagOptions[o]; ok {
					mount = append(mount, flag)
					continue
				}
				name := strings.ReplaceAll(key, "_", "-")
				if why, ok := refusedOptions[name]; ok {
					return nil, false, usagef("-o %s: %s", o, why)
				}
				if name == "limit" {
					value = fstabLimit(value)
				}
				f := fs.Lookup(name)
				if f == nil {
					return nil, false, usagef("-o %s: unknown option; want a mount flag's name (sluice help mount) or a generic mount option", o)
				}
				if !hasValue {
					if f.NoOptDefVal == "" {
						return nil, false, usagef("-o %s: --%s needs a value (%s=VALUE)", o, name, key)
					}
					mount = append(mount, "--"+name)
					continue
				}
				mount = append(mount, "--"+name+"="+value)
			}
		case a == "-f":
			fake = true
		case a == "-n" || a == "-s" || a == "-v":
		case strings.HasPrefix(a, "-"):
			return nil, false, usagef("%s: unknown mount helper flag (want -o OPTIONS, -n, -s, -v or -f)", a)
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, false, usagef("want SOURCE and MOUNTPOINT, got %d argument(s)", len(pos))
	}
	if pos[0] != "none" && pos[0] != "-" && pos[0] != "" {
		mount = append(mount, pos[0])
	}
	return append(mount, pos[1]), fake, nil
}

// cmdFstab is sluice run as mount.fuse.sluice.
func cmdFstab(args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, fstabHelp)
		return nil
	}
	margs, fake, err := fstabArgs(args)
	if err != nil {
		return err
	}
	// Check everything the command line would, with its messages.
	opts, _, err := commandOptions(margs, io.Discard)
	if err != nil {
		return err
	}
	if fake {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The log lives beside the control socket, in a directory checked as
	// that one is (in /tmp without root, where another user may have
	// planted it), and is never opened through a symlink.
	dir := control.Dir()
	if err := control.MakeDir(dir); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "mount."+strings.ReplaceAll(strings.Trim(opts.Mountpoint, "/"), "/", "-")+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("mount log %s is a symlink: refusing to write through it (remove it)", logPath)
	}
	if err != nil {
		return fmt.Errorf("mount log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(self, append([]string{"mount"}, margs...)...)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	for {
		if _, err := control.Stat(opts.Mountpoint); err == nil {
			return nil // serving; the daemon goes on alone
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("sluice mount exited (%v): %s", err, strings.TrimSpace(string(b)))
		case <-deadline:
			return errors.New("sluice mount did not start serving within 30 s; see " + logPath)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
