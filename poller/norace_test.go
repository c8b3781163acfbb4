//go:build !race

package poller

const raceEnabled = false
