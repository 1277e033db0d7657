//go:build race

package lease

// raceOn: the race detector is on, and the in-process Redis's Lua runs
// many times slower.
const raceOn = true
