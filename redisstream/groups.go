package redisstream

// maxEnsured bounds groupCache: a template naming a stream per aggregate
// makes millions of streams, and forgetting one only costs a check.
const maxEnsured = 100_000

// groupCache holds the streams an append made sure have every consumer
// group (Config.Groups), so that later batches skip the check (XINFO
// GROUPS) for them. The strategies of one Sink share it: what one made sure
// of holds for the others. Streams enter it only after an append that ran
// for certain.
type groupCache struct {
	ensured map[string]bool
}

func newGroupCache() *groupCache { return &groupCache{ensured: map[string]bool{}} }

// has reports whether key is known to have every group.
func (c *groupCache) has(key string) bool { return c.ensured[key] }

// add records that the streams keys have every group now.
func (c *groupCache) add(keys []string) {
	if len(keys) == 0 {
		return
	}
	if len(c.ensured)+len(keys) > maxEnsured {
		clear(c.ensured)
	}
	for _, key := range keys {
		c.ensured[key] = true
	}
}
