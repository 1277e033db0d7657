// Package cost learns, from completions alone, what a device's I/Os cost
// and how much of that the device can serve: the two things a scheduler
// needs to share a device that no one has calibrated (a disk, an NFS
// export, a FUSE file system below sluice) by device time rather than by
// bytes or I/Os, and to make anyone wait only when the device is
// saturated.
//
// It is pure: time is an argument, in nanoseconds of the caller's
// monotonic clock; nothing here sleeps, reads the clock or starts
// goroutines, and the mount and the simulator drive it alike.
//
// # The cost model
//
// Model charges each I/O the device time a device serving one I/O at a
// time would have spent on it: from when it was sent, or when the I/O
// before it finished if that was later, to when it finished. On such a
// device that is exactly its service, not the time it waited behind a
// larger one; on a device that serves several at once and is kept busy,
// it is the device's time per I/O (four 1 ms reads served together are
// charged 250 µs each), and the capacity controller finds the scale.
//
// From those, per direction, it fits a linear cost, as iocost's model has
// it: a cost per sequential I/O, a cost per random I/O (one that does not
// start where the file's last I/O ended) and a cost per byte, by
// exponentially weighted least squares over about HalfLife I/Os, with a
// little weight on a prior so that a workload of one size and pattern
// still prices others sensibly. No offline calibration: the costs follow
// the device as it is now.
//
// # The capacity controller
//
// Controller decides, every Period, how much device time a second the
// device is given: none at first (nobody waits), and once completions say
// the device is saturated, what it just completed, less a little, so that
// requests wait in sluice, where they are ordered by share, rather than in
// the device. Saturated means most of the period's device time went to
// completions slower than Threshold times what they take on a device
// with room (the 10th percentile of their kind and size, or their cost if
// larger) plus Slack, while the device was never idle for more than
// Idle of the period; or a group's latency target missed by more than one
// completion in ten. From then on the capacity goes down by Down after a
// saturated period, up by Up after one in which requests waited on it
// while the device kept up, as a delay-based congestion controller does,
// and off again after Calm of neither. The percentiles rise slowly on
// higher latencies, so a device that became slower for good is learned
// again.
package cost
