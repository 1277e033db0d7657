package fsys

import (
	"fmt"
	"os"
	"strings"
)

// Transports: how the kernel's requests reach the mount (Options.Transport).
// Both serve the same requests with the same code and give the same
// answers; io_uring takes a request and answers the one before in one
// system call where /dev/fuse takes a read(2) and a writev(2).
const (
	// TransportAuto is io_uring where the kernel offers it, /dev/fuse
	// otherwise.
	TransportAuto = "auto"
	// TransportDev is read(2) and writev(2) on /dev/fuse.
	TransportDev = "dev"
	// TransportURing is FUSE-over-io_uring (Linux 6.14+, with the fuse
	// module's enable_uring parameter Y): Mount fails where the kernel
	// does not offer it.
	TransportURing = "uring"
)

// DefaultTransport is Options.Transport's default.
const DefaultTransport = TransportDev

// enableURing is the fuse module's parameter that lets a connection use
// io_uring; the kernel offers it at INIT only while it is Y.
const enableURing = "/sys/module/fuse/parameters/enable_uring"

// URingOffered reports whether the kernel offers FUSE-over-io_uring to
// new mounts, and if not, why and what would enable it.
func URingOffered() (bool, string) {
	b, err := os.ReadFile(enableURing)
	switch {
	case err != nil:
		return false, fmt.Sprintf("this kernel has no FUSE-over-io_uring (%v; it needs Linux 6.14+ built with CONFIG_FUSE_IO_URING)", err)
	case strings.TrimSpace(string(b)) != "Y":
		return false, fmt.Sprintf("the kernel offers no FUSE-over-io_uring while %s is N (enable it as root: echo Y > %s)", enableURing, enableURing)
	}
	return true, ""
}

// transport checks opts.Transport and reports whether the mount asks
// the kernel for io_uring.
func transport(opts *Options) (bool, error) {
	switch opts.Transport {
	case "":
		opts.Transport = DefaultTransport
		return transport(opts)
	case TransportDev:
		return false, nil
	case TransportAuto:
		ok, _ := URingOffered()
		return ok, nil
	case TransportURing:
		if ok, why := URingOffered(); !ok {
			return false, fmt.Errorf("transport %s: %s; or use transport %s or %s", TransportURing, why, TransportAuto, TransportDev)
		}
		return true, nil
	}
	return false, fmt.Errorf("transport %q: want %s, %s or %s", opts.Transport, TransportAuto, TransportDev, TransportURing)
}

// WriteCache reports whether the kernel's write cache takes the mount's
// write()s (Options.WriteCache, as the kernel agreed to it at the mount).
func (f *FS) WriteCache() bool { return f.opts.WriteCache }

// Transport is the transport the mount's requests come by: TransportURing
// or TransportDev.
func (f *FS) Transport() string {
	if f.server.IOUring() {
		return TransportURing
	}
	return TransportDev
}
