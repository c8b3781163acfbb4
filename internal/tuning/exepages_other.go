//go:build !linux

package tuning

// UnmapStartupPages does nothing outside Linux, where the kernel's
// fault-around it works against is not known to be the same.
func UnmapStartupPages() (int64, error) { return 0, nil }
