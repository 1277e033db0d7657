//go:build !race

package lease

const raceOn = false
