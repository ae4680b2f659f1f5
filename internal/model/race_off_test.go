//go:build !race

package model_test

// raceEnabled: under the race detector sync.Pool drops a quarter of what is put in it, so a
// call's allocations vary by a pooled buffer's size from call to call.
const raceEnabled = false
