//go:build race

package poller

// raceEnabled is true under -race, which slows the relay about tenfold.
const raceEnabled = true
