// Package group names the tenants of a sluice mount, parses their limits, and
// decides which tenant issued each request.
//
// # Group names
//
// A group name is a slash-separated path of components, each made of the
// characters A-Z a-z 0-9 . _ - ("tenants/a/build"). Components are never
// empty, "." or "..", and a name neither starts nor ends with a slash. The
// tree is implied by the names: "tenants/a/build" is a child of "tenants/a".
// Callers that match no rule belong to [Default].
//
// # Sizes
//
// [ParseSize] reads a decimal number, optionally with a fraction, followed
// by an optional unit. Units are case-sensitive:
//
//	(none), B          bytes
//	k, K, KiB          1024
//	M, MiB             1024²
//	G, GiB             1024³
//	T, TiB             1024⁴
//	kB, MB, GB, TB     1000, 1000², 1000³, 1000⁴
//
// Lower-case m, g and t, and KB, are rejected rather than guessed at. A
// fraction is rounded to the nearest whole byte ("1.5KiB" is 1536); a
// non-zero value that rounds to zero bytes is rejected, as are negative
// values and values beyond the range of int64.
//
// # Limits
//
// A limit argument (--limit, and "sluice set") is a group name followed by
// KEY=VALUE pairs, separated by white space:
//
//	default rbps=10MiB riops=max
//	tenants/a wbps=1G wiops=100
//
// rbps and wbps take sizes (bytes per second); riops and wiops take counts:
// a whole number with an optional decimal unit k or K (1000), M (10⁶) or
// G (10⁹), so "1.5k" is 1500. Every value may be "max" for no limit. Zero
// is rejected: it would mean "no I/O at all", which is never what is meant,
// and is easily confused with "unlimited". weight takes a whole number from
// 1 to 10000, or "default" (100): the group's share beside its siblings
// under a saturated parent. The floors rbps.min and wbps.min take sizes,
// riops.min and wiops.min counts, each also "none" (no floor): what the
// group gets of its saturated parent first. Keys not given keep their
// previous value; a group named for the first time starts unlimited, of
// weight 100, without floors.
//
// # Rules
//
// A rule argument (--group) is a group name followed by one or more
// conditions, all of which must hold:
//
//	uid=N         the caller's fs uid (N may be a user name)
//	gid=N         the caller's fs gid or any supplementary group (N may be a group name)
//	comm=NAME     the process name in /proc/PID/comm, exactly (at most 15 bytes)
//	cgroup=/PATH  any of the caller's cgroups, v1 or v2, is PATH or below it
//
// Several rules may name the same group; a caller matching any of them is in
// it. Rules are tried in the order given and the first match wins.
package group
