//go:build !race

package e2e

// raceEnabled: the race detector slows CPU work several times, so timing bounds do not hold.
const raceEnabled = false
