// Package throttle enforces per-group I/O limits (bytes and I/Os per
// second, for reads and writes, in cgroup v2 io.max vocabulary) over a tree
// of groups. It is pure: the time is an argument, in nanoseconds of the
// caller's monotonic clock, and nothing here sleeps, reads the clock or
// starts goroutines. Neither Tree nor Queue is safe for concurrent use; the
// caller holds one lock around both.
//
// # Absolute schedule
//
// Each group keeps, per direction and per dimension (bytes, I/Os), a
// theoretical arrival time (tat), as in the generic cell rate algorithm.
// Charging cost units at now sets tat = max(tat, now-Burst) + cost/rate.
// The division is done in integer nanoseconds with 128-bit intermediates
// and its remainder carried to the next charge, so after any sequence of
// charges the schedule stands at exactly floor(total*1e9/rate) past where
// it started: no drift, no rounding loss, at any rate. A caller that wakes
// late (Go timers wake at about 1 ms granularity) loses nothing, because
// the schedule is absolute: everything due is released at once.
//
// # Debt admission and burst
//
// A level admits a request when its tat is not after now, whatever the
// request's size. A request larger than the burst is therefore admitted as
// soon as the group is out of debt, and its cost is debt the next request
// pays; no request is held back whole waiting for a budget it will never
// fit. Idle time earns credit only up to Burst (10 ms by default): after a
// long idle a group may send Burst worth of its rate, plus the one request
// that goes into debt, before it must wait.
//
// # Hierarchy
//
// Groups form a tree of slash-separated paths below an implicit unlimited
// root. A request is eligible when every level from its group to the top is
// open in its direction (Tree.Eligible is the maximum over levels and
// dimensions), and it is charged to every level in the same step, so delays
// never add up level by level. A queued request is charged to each level as
// of when it reached that level, so the time it waits for an ancestor is not
// lost to the burst cap below: a limited group under a busy parent still
// gets its own rate.
//
// # Fairness
//
// Queue orders the requests that could go at the same moment, which happens
// when siblings wait on a shared, saturated parent. Each parent runs
// start-time fair queueing over its backlogged children, with the parent's
// own requests as one more child: the child with the smallest start tag
// goes first (ties by arrival), and serving a request of n bytes moves the
// child's tag by n*DefaultWeight/weight. Siblings thus share a saturated
// parent by bytes in proportion to their weights (Limits.Weight, 100 by
// default), not by request count: a 4 KiB reader and a 1 MiB reader of
// equal weights get the same bandwidth, and one of weight 200 twice that
// of one of weight 100.
// A child that becomes backlogged starts at the parent's virtual clock, so
// idle time earns no advantage. Within a group, demand requests go before
// readahead, each class in arrival order, and reads and writes queue
// separately. A child blocked by its own limits never holds back a sibling
// the parent would admit.
//
// # Limit changes, refunds and budget
//
// Tree.SetLimits rescales outstanding debt to the new rate exactly (D ns at
// the old rate become D*old/new ns), forgives it when a dimension becomes
// unlimited, and starts a newly limited dimension at now. Tree.Refund takes
// back bytes a short read did not use, moving the schedule back exactly,
// but never creating more than Burst of credit. Tree.Budget tells how many
// bytes a group may send right now without waiting, which is what a
// readahead window is clamped to.
//
// After any of these changes the caller calls Queue.Release, which returns
// the released requests and the single next wake-up time; queued requests
// never hang.
package throttle
