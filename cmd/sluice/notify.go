package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
)

// sdNotify sends state (such as "READY=1") to the service manager that
// runs sluice as a Type=notify service, as sd_notify(3) does: one
// datagram to the unix socket named by $NOTIFY_SOCKET, a path or, when
// it starts with '@', a name in the abstract namespace. Without
// NOTIFY_SOCKET it sends nothing and returns false.
func sdNotify(state string) (sent bool, err error) {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return false, nil
	}
	if name[0] != '/' && name[0] != '@' {
		return false, fmt.Errorf("NOTIFY_SOCKET=%s: want a path or an abstract name starting with '@'", name)
	}
	// Go's unix addresses put a name starting with '@' in the abstract
	// namespace.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, err
	}
	return true, nil
}

// notify is sdNotify for the mount: a failure is logged, never fatal.
func notify(log *slog.Logger, state string) {
	if sent, err := sdNotify(state); err != nil {
		log.Warn("notifying the service manager", "state", state, "err", err)
	} else if sent {
		log.Debug("notified the service manager", "state", state)
	}
}
