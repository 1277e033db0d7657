package fsys

import (
	"strconv"
	"sync"
	"syscall"

	"sluice/group"
)

// capSysAdmin is CAP_SYS_ADMIN's number in linux/capability.h.
const capSysAdmin = 21

// hasCap reports whether the caller of a request, thread tid as the
// kernel names it, holds capability c as the kernel's capable(c) asks
// before it lets a caller on SOURCE do what c allows: in its effective
// set (CapEff of /proc/TID/status) and in sluice's own user namespace.
// Capabilities held in a user namespace the caller made itself count for
// nothing outside it, so a caller in another namespace holds none; so
// does one the kernel did not name (tid 0) or whose thread is gone.
func hasCap(tid uint32, c uint) bool {
	eff, err := group.CapEff(int32(tid))
	if err != nil || eff&(1<<c) == 0 {
		return false
	}
	ns, err := userNS("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/ns/user")
	own, ownErr := ownUserNS()
	return err == nil && ownErr == nil && ns == own
}

// nsID identifies a namespace: the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

func userNS(path string) (nsID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	return nsID{st.Dev, st.Ino}, nil
}

// ownUserNS is sluice's own user namespace, which it never leaves.
var ownUserNS = sync.OnceValues(func() (nsID, error) { return userNS("/proc/self/ns/user") })
