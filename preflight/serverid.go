package preflight

import (
	"context"
	"fmt"

	"github.com/binlog-outbox/binlog-outbox/redisstream"
)

// withServerIDClaim completes the server id line with the claims relays
// record in Redis (redisstream.ServerIDKey), which the documented grants
// let the relay read where they do not let it list the server's replicas
// (MariaDB's SHOW SLAVE HOSTS needs REPLICATION MASTER ADMIN): a relay of
// another position holding --server-id fails the line, with the words run
// stops with before it opens a binlog connection (also where the server
// listed the id among its replicas: that relay is the one); without such a
// claim the unlisted replicas are no reason to warn, since relays of one
// Redis are what share a configuration. The results are changed in place.
func withServerIDClaim(ctx context.Context, results []Result, cfg Config) {
	i := -1
	for j, r := range results {
		if r.Name == NameServerID && (r.Status == Pass || r.Status == Warn || r.Cause == CauseServerIDInUse) {
			i = j
		}
	}
	if i < 0 || cfg.Redis == nil || cfg.ServerID == 0 {
		return
	}
	c := cfg.Redis.NewClient(redisTimeout)
	defer c.Close()
	claim, ok, err := redisstream.ReadServerIDClaim(ctx, c, cfg.ServerID)
	if err != nil {
		// Redis's own lines say why; the line stays as the server saw it.
		return
	}
	if ok && claim.PositionKey != cfg.PositionKey {
		res := fail(NameServerID, fmt.Sprintf("server id %d is in use by %s: run would stop before it opens a binlog connection with it", cfg.ServerID, claim),
			"give this relay a --server-id of its own (no server, replica or other relay may use it), or leave --server-id unset: the default differs per host name and position key", binlogOnly)
		res.Cause = CauseServerIDInUse
		results[i] = res
		return
	}
	if results[i].Status == Warn {
		results[i] = pass(NameServerID, fmt.Sprintf("--server-id %d is not the server's own, and no relay of another position claims it in Redis "+
			"(the server's replicas are not listed: that needs a grant the relay does not; %s)", cfg.ServerID, results[i].Fix), binlogOnly)
	}
}

// redisUsable reports whether the Redis checks reached Redis.
func redisUsable(results []Result) bool {
	for _, r := range results {
		if (r.Name == NameRedis || r.Name == NameRedisSentinel) && r.Status != Pass {
			return false
		}
	}
	return true
}
