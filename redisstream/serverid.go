package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// DefaultServerIDClaimTTL is how long a claim outlives its holder's last
// renewal: a relay that stopped frees its server id within this for a relay
// of another position.
const DefaultServerIDClaimTTL = 30 * time.Second

// ServerIDKey is the key of the claim on a binlog server id (--server-id):
// the relay reading with it names its position key and itself there, so
// that a relay of another position with the same id refuses before it opens
// a binlog connection (the server would drop the older one, again and
// again), and `check` sees the collision with the documented grants, which
// cannot list the server's replicas on MariaDB.
func ServerIDKey(id uint32) string {
	return KeyPrefix + "server-id:" + strconv.FormatUint(uint64(id), 10)
}

// ServerIDClaim is what a claim of a server id holds.
type ServerIDClaim struct {
	// PositionKey is the position the holder reads for; relays of one
	// position share the id and take turns by the lease.
	PositionKey string
	// Holder names the relay process (hostname/pid/...).
	Holder string
}

func (c ServerIDClaim) encode() string { return c.PositionKey + "\n" + c.Holder }

func decodeClaim(v string) ServerIDClaim {
	key, holder, _ := strings.Cut(v, "\n")
	return ServerIDClaim{PositionKey: key, Holder: holder}
}

// claimScript takes or renews the claim KEYS[1] for position ARGV[1] with
// value ARGV[2] for ARGV[3] ms, unless a relay of another position holds
// it, or, with ARGV[4] "1" (exclusive), another relay of this one; it
// returns the other holder's value, or false.
var claimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and (string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\n' or (ARGV[4] == '1' and v ~= ARGV[2])) then return v end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return false
`)

// releaseClaimScript deletes the claim KEYS[1] if it still holds ARGV[1]: a
// relay that took the id since keeps its claim.
var releaseClaimScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// ServerIDClaimer claims one server id for one position.
type ServerIDClaimer struct {
	client redis.UniversalClient
	id     uint32
	claim  ServerIDClaim
	ttl    time.Duration
	// heldUntil is when the last claim taken expires, counted from before
	// the script ran; zero before the first.
	heldUntil time.Time
	// exclusive refuses relays of the same position too (Exclusive).
	exclusive bool
}

// Exclusive makes the claim refuse another relay of the same position as
// well: a relay without the lease reads alone, and a twin of it (the same
// configuration started twice) would otherwise connect with the same id
// and knock it off its binlog connection, again and again.
func (s *ServerIDClaimer) Exclusive() *ServerIDClaimer {
	s.exclusive = true
	return s
}

// NewServerIDClaimer returns the claimer of server id id for the relay
// holder of positionKey; ttl 0 is DefaultServerIDClaimTTL.
func NewServerIDClaimer(client redis.UniversalClient, id uint32, positionKey, holder string, ttl time.Duration) *ServerIDClaimer {
	if ttl <= 0 {
		ttl = DefaultServerIDClaimTTL
	}
	return &ServerIDClaimer{client: client, id: id, claim: ServerIDClaim{PositionKey: positionKey, Holder: holder}, ttl: ttl}
}

// Claim takes or renews the claim for its TTL. When a relay of another
// position holds it (with Exclusive, any other relay), it changes nothing
// and returns taken false, other naming that relay and its position.
func (s *ServerIDClaimer) Claim(ctx context.Context) (other string, taken bool, err error) {
	key := ServerIDKey(s.id)
	start := time.Now()
	exclusive := "0"
	if s.exclusive {
		exclusive = "1"
	}
	v, err := claimScript.Run(ctx, s.client, []string{key}, s.claim.PositionKey, s.claim.encode(), s.ttl.Milliseconds(), exclusive).Text()
	if errors.Is(err, redis.Nil) {
		s.heldUntil = start.Add(s.ttl)
		return "", true, nil
	}
	if err != nil {
		if time.Until(s.heldUntil) > s.Renewal() {
			// The claim taken before holds for longer than a renewal
			// period yet: Redis refusing writes (maxmemory) or a
			// failed renewal changes nothing of who holds the id, and a
			// session restarted meanwhile reads on with it rather than
			// fail a second way for one outage.
			return "", true, nil
		}
		return "", false, fmt.Errorf("claim server id %d (%s): %w", s.id, key, redisconn.Classify(err))
	}
	return decodeClaim(v).String(), false, nil
}

// Release gives the claim up if this relay still holds it, so that a relay
// of another position may take the id at once after a clean stop.
func (s *ServerIDClaimer) Release(ctx context.Context) error {
	key := ServerIDKey(s.id)
	if err := releaseClaimScript.Run(ctx, s.client, []string{key}, s.claim.encode()).Err(); err != nil {
		return fmt.Errorf("release server id %d (%s): %w", s.id, key, redisconn.Classify(err))
	}
	s.heldUntil = time.Time{}
	return nil
}

// String names the claim's holder and position for messages.
func (c ServerIDClaim) String() string {
	return "the relay " + c.Holder + " of position " + c.PositionKey
}

// Renewal says how often a holder renews its claim.
func (s *ServerIDClaimer) Renewal() time.Duration { return s.ttl / 3 }

// ReadServerIDClaim returns the claim on server id id; ok false when nobody
// holds it.
func ReadServerIDClaim(ctx context.Context, client redis.UniversalClient, id uint32) (claim ServerIDClaim, ok bool, err error) {
	v, err := client.Get(ctx, ServerIDKey(id)).Result()
	if errors.Is(err, redis.Nil) {
		return ServerIDClaim{}, false, nil
	}
	if err != nil {
		return ServerIDClaim{}, false, fmt.Errorf("GET %s: %w", ServerIDKey(id), redisconn.Classify(err))
	}
	return decodeClaim(v), true, nil
}
