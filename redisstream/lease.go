package redisstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/redisconn"
)

// Defaults of LeaseConfig and of the holder's renewals.
const (
	// DefaultLeaseTTL keeps a standby's takeover after the holder died or
	// froze within TTL plus one poll (DefaultLeaseRenew): about 6s.
	DefaultLeaseTTL = 5 * time.Second
	// DefaultLeaseRenew renews the lease four times before it could
	// expire, so that a Redis or network hiccup of a few seconds does not
	// make the holder step down.
	DefaultLeaseRenew = time.Second
)

// LeaseConfig configures a Lease.
type LeaseConfig struct {
	// Key holds the lease (Keys.Lease).
	Key string
	// TTL is how long the lease outlives its holder's last renewal
	// (default DefaultLeaseTTL). Shorter takes over sooner after the holder
	// dies, and makes a holder that cannot reach Redis for TTL step down.
	TTL time.Duration
	// Holder names this process in the lease for logs and status (default
	// hostname/pid).
	Holder string
	// Process identifies this process in the lease (default SelfProcess;
	// none where /proc cannot tell), so that this relay restarted after a
	// crash, or another on the same machine and PID namespace, can prove
	// it gone and take its lease at once instead of waiting out the TTL.
	Process *Process
	// Log receives the line that says a lease was taken from a process
	// proven gone (default: none).
	Log *slog.Logger
	// Cluster takes a new epoch with each take (Redis Cluster,
	// --redis-cluster): the lease key lies in one hash slot, so the append
	// scripts of the other slots check a per-slot fence of the epoch
	// instead, which a take raises in the slots an earlier holder may still
	// write and each script in its own slot (fence.go). Default off: a
	// standalone Redis checks the lease itself.
	Cluster bool
}

// Lease is the lease of one position in Redis: the one relay of the position
// that reads holds it, the others wait to take it. The holder's token is
// checked by the append script (Config.Lease), so a holder that lost it
// (paused past the TTL, then taken over) cannot append any more: the script
// refuses it before writing anything. On Redis Cluster (LeaseConfig.Cluster)
// the scripts of the other slots cannot read it: each take has an epoch,
// and the scripts check per-slot fences of it instead (fence.go).
//
// Its methods are safe for concurrent use: the holder renews on a goroutine
// of its own while the sink appends.
type Lease struct {
	client redis.UniversalClient
	cfg    LeaseConfig

	mu sync.Mutex
	// value is the lease as stored while this process holds it, "" when it
	// does not; each take has a new token, so that a request of an earlier
	// tenure that Redis runs late is refused too.
	value string
	// validUntil is when the lease expires at the earliest, counted from
	// before the request that set its expiry.
	validUntil time.Time
	// tried is the token of the last take whose reply was lost: if Redis
	// applied it, the lease holds it.
	tried     string
	triedSent time.Time
	// fence is the epoch and token of the take held ("<epoch>:<token>",
	// with LeaseConfig.Cluster only), what the fences of the slots hold.
	fence string

	// watched holds a token while an append transaction WATCHes the lease
	// key (append_multi.go), and Renew waits for it: the renewal's PEXPIRE
	// changes that key, and Redis aborts an EXEC whose watched key changed,
	// even by its own holder. At catch-up a transaction is in flight most
	// of the time, so each renewal cost a batch sent and queued twice: 4-6%
	// more bytes for Redis to parse in binlog-outbox-bench's catch-ups.
	watched chan struct{}
}

// LeaseInfo is a lease as stored: JSON, readable with redis-cli GET.
type LeaseInfo struct {
	// Holder names the process: hostname/pid.
	Holder string `json:"holder"`
	// Token is new at each take.
	Token      string    `json:"token"`
	AcquiredAt time.Time `json:"acquired_at"`
	// Process identifies the holder's process, for a relay on the same
	// machine to prove it gone (LeaseConfig.Process); absent where it
	// could not be read.
	Process *Process `json:"process,omitempty"`
	// Epoch is the take's number on Redis Cluster (LeaseConfig.Cluster):
	// each take has a higher one than every take before it, 0 elsewhere.
	Epoch int64 `json:"epoch,omitempty"`
}

// String names the holder as logs and status show it: hostname/pid and the
// token's first 8 characters, which tell one take from the next.
func (i LeaseInfo) String() string {
	return i.Holder + "/" + i.TokenPrefix()
}

// TokenPrefix is the first 8 characters of the token.
func (i LeaseInfo) TokenPrefix() string {
	return i.Token[:min(8, len(i.Token))]
}

// NewLease returns the lease kept under cfg.Key; nothing is taken yet.
func NewLease(client redis.UniversalClient, cfg LeaseConfig) (*Lease, error) {
	if cfg.Key == "" {
		return nil, fmt.Errorf("%w: redisstream: no lease key configured", outbox.ErrConfig)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultLeaseTTL
	}
	if cfg.TTL < time.Millisecond {
		return nil, fmt.Errorf("%w: redisstream: lease TTL %s is below a millisecond", outbox.ErrConfig, cfg.TTL)
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if cfg.Process == nil {
		if p, ok := SelfProcess(); ok {
			cfg.Process = &p
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Lease{client: client, cfg: cfg, watched: make(chan struct{}, 1)}, nil
}

// Key returns the key the lease is kept under.
func (l *Lease) Key() string { return l.cfg.Key }

// Value returns the lease as stored while this process holds it, "" when it
// does not; the append script compares it with the stored one.
func (l *Lease) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// TryAcquire takes the lease, with a new token, when nobody holds it
// (SET NX PX). It reports whether this process holds it now and, when not,
// who does ("" when it expired in between: try again).
func (l *Lease) TryAcquire(ctx context.Context) (held bool, holder string, err error) {
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return false, "", fmt.Errorf("lease token: %w", err)
	}
	info := LeaseInfo{Holder: l.cfg.Holder, Token: hex.EncodeToString(token), AcquiredAt: time.Now().UTC(), Process: l.cfg.Process}
	raw, err := json.Marshal(info)
	if err != nil {
		return false, "", fmt.Errorf("encode lease: %w", err)
	}
	value := string(raw)
	sent := time.Now()
	var ok bool
	if l.cfg.Cluster {
		value, ok, err = l.acquireEpoch(ctx, value)
	} else {
		ok, err = l.client.SetNX(ctx, l.cfg.Key, value, l.cfg.TTL).Result()
	}
	if err != nil {
		if uncertain(err) {
			// Redis may have set it: the next try finds it ours.
			l.mu.Lock()
			l.tried, l.triedSent = info.Token, sent
			l.mu.Unlock()
		}
		return false, "", fmt.Errorf("take the lease %s: %w", l.cfg.Key, redisconn.Classify(err))
	}
	if ok {
		l.hold(value, sent)
		return true, holderOf(value), nil
	}
	cur, err := l.client.Get(ctx, l.cfg.Key).Result()
	if errors.Is(err, redis.Nil) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read the lease %s: %w", l.cfg.Key, redisconn.Classify(err))
	}
	l.mu.Lock()
	tried, triedSent := l.tried, l.triedSent
	l.mu.Unlock()
	// The token tells a take of ours whose reply was lost: on Redis
	// Cluster the stored value also has an epoch this process never saw.
	// The cluster client runs a script again after a lost reply, and the
	// second run finds the lease the first one took: this try's token.
	switch tokenOf(cur) {
	case info.Token:
		l.hold(cur, sent)
		return true, holderOf(cur), nil
	case "":
	case tried:
		l.hold(cur, triedSent)
		return true, holderOf(cur), nil
	}
	if took, stored, err := l.takeFromGone(ctx, cur, string(raw)); took || err != nil {
		return took, holderOf(stored), err
	}
	return false, holderOf(cur), nil
}

// takeFromGone takes the lease held as cur when its holder's process is
// proven gone (provablyGone): a relay restarted after a crash, as systemd
// or a supervisor does at once, would otherwise wait out the lease of its
// own dead process, TTL without delivery after every crash. The take
// replaces exactly cur, so that a lease renewed or taken meanwhile is left
// alone; a request the dead process sent before it died is refused by the
// new token, as after an expiry.
func (l *Lease) takeFromGone(ctx context.Context, cur, value string) (took bool, stored string, err error) {
	var info LeaseInfo
	if err := json.Unmarshal([]byte(cur), &info); err != nil {
		return false, "", nil
	}
	gone, why := provablyGone(info.Process, l.cfg.Process)
	if !gone {
		return false, "", nil
	}
	sent := time.Now()
	keys := []string{l.cfg.Key}
	head, tail := value, ""
	if l.cfg.Cluster {
		keys = append(keys, EpochKey(l.cfg.Key))
		head, _ = strings.CutSuffix(value, "}")
		head, tail = head+`,"epoch":`, "}"
	}
	stored, err = takeGoneScript.Run(ctx, l.client, keys, head, tail, l.cfg.TTL.Milliseconds(), cur).Text()
	if errors.Is(err, redis.Nil) {
		return false, "", nil // renewed, released or taken meanwhile
	}
	if err != nil {
		if uncertain(err) {
			l.mu.Lock()
			l.tried, l.triedSent = tokenOf(value), sent
			l.mu.Unlock()
		}
		return false, "", fmt.Errorf("take the lease %s from %s, which is gone: %w", l.cfg.Key, info.Holder, redisconn.Classify(err))
	}
	l.hold(stored, sent)
	l.cfg.Log.Info("took the lease of a relay that is gone, without waiting for it to expire",
		"gone_holder", info.String(), "proof", why+" on this machine (same boot and PID namespace)")
	return true, stored, nil
}

// takeGoneScript replaces the lease KEYS[1] when it still is ARGV[4] (held
// by a process proven gone): ARGV[1] then ARGV[2], with a new epoch from the
// counter KEYS[2] between them when there is one (Redis Cluster), for
// ARGV[3] milliseconds. It returns the stored lease, or false when the lease
// changed.
var takeGoneScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[4] then return false end
local value = ARGV[1] .. ARGV[2]
if #KEYS > 1 then value = ARGV[1] .. redis.call('INCR', KEYS[2]) .. ARGV[2] end
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
return value
`)

// acquireScript takes the lease KEYS[1] when nobody holds it and, in the
// same step, a new epoch from the counter KEYS[2] (in the lease's slot):
// the lease is ARGV[1] with the epoch appended, then ARGV[2], for ARGV[3]
// milliseconds. It returns the stored lease, or false when it is held.
// The take and its epoch are one step, so that two takes can never share
// an epoch, and the epoch of a take is above that of every earlier take
// the counter saw.
var acquireScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local epoch = redis.call('INCR', KEYS[2])
local value = ARGV[1] .. epoch .. ARGV[2]
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
return value
`)

// acquireEpoch is the take of LeaseConfig.Cluster: value (the lease's JSON,
// without an epoch) gets the epoch the script takes.
func (l *Lease) acquireEpoch(ctx context.Context, value string) (stored string, ok bool, err error) {
	head, _ := strings.CutSuffix(value, "}")
	stored, err = acquireScript.Run(ctx, l.client, []string{l.cfg.Key, EpochKey(l.cfg.Key)}, head+`,"epoch":`, "}", l.cfg.TTL.Milliseconds()).Text()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return stored, true, nil
}

// EpochKey returns the key of the counter the epochs of the lease kept
// under leaseKey are taken from (LeaseConfig.Cluster): the lease key,
// ":epoch:" and the hash tag of the lease key's own slot, so that one
// script takes both.
func EpochKey(leaseKey string) string {
	return leaseKey + ":epoch:{" + SlotTag(Slot(leaseKey)) + "}"
}

// raiseEpochScript raises the counter KEYS[1] to ARGV[1] unless it is at
// least that already.
var raiseEpochScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0
`)

// raiseEpoch makes the next take's epoch higher than epoch: a fence of a
// slot holds it, so the counter went back (its master lost writes in a
// failover) and a take with a lower epoch could never fence that slot.
func (l *Lease) raiseEpoch(ctx context.Context, epoch int64) error {
	if err := raiseEpochScript.Run(ctx, l.client, []string{EpochKey(l.cfg.Key)}, epoch).Err(); err != nil {
		return fmt.Errorf("raise the lease's epoch %s to %d: %w", EpochKey(l.cfg.Key), epoch, redisconn.Classify(err))
	}
	return nil
}

// tokenOf returns the token of a stored lease, "" when it is none of ours.
func tokenOf(value string) string {
	var info LeaseInfo
	if err := json.Unmarshal([]byte(value), &info); err != nil {
		return ""
	}
	return info.Token
}

// currentFence returns what the fences of the slots hold for the take this process
// holds ("<epoch>:<token>", LeaseConfig.Cluster only) and its epoch; ""
// when it holds none, or when by its own clock the lease may have expired:
// a process that wakes up from a pause appends nothing before a renewal
// told it the lease is still its own.
func (l *Lease) currentFence() (fence string, epoch int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.value == "" || l.fence == "" || time.Now().After(l.validUntil) {
		return "", 0
	}
	var info LeaseInfo
	_ = json.Unmarshal([]byte(l.value), &info) // hold parsed it already
	return l.fence, info.Epoch
}

func (l *Lease) hold(value string, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.value, l.validUntil = value, sent.Add(l.cfg.TTL)
	l.tried, l.fence = "", ""
	var info LeaseInfo
	if err := json.Unmarshal([]byte(value), &info); err == nil && info.Epoch > 0 {
		l.fence = fmt.Sprintf("%d:%s", info.Epoch, info.Token)
	}
}

// lost forgets the lease if it still is value: a renewal or an append found
// it gone.
func (l *Lease) lost(value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.value == value {
		l.value, l.fence = "", ""
	}
}

// renewScript extends the lease only while it holds the caller's token: a
// plain PEXPIRE would extend a lease another relay took meanwhile.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// releaseScript deletes the lease only while it holds the caller's token.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Renew extends the lease this process holds by the TTL. held false means
// it is lost: another relay holds it, it expired, or it could not be renewed
// before it would expire (err then says why). An error with held true means
// the renewal failed while the lease is still valid: the next call tries
// again.
func (l *Lease) Renew(ctx context.Context) (held bool, err error) {
	l.mu.Lock()
	value, until := l.value, l.validUntil
	l.mu.Unlock()
	if value == "" {
		return false, nil
	}
	// A renewal that cannot be answered before the lease expires is no use:
	// give it up to half the TTL, so the next try still counts.
	rctx, cancel := context.WithTimeout(ctx, l.cfg.TTL/2)
	defer cancel()
	// After the append transaction in flight, not in its midst (watched);
	// its wait counts against the renewal's time.
	done, err := l.watch(rctx)
	if err != nil {
		err = fmt.Errorf("renew the lease %s: waiting for the append in flight: %w", l.cfg.Key, err)
		if time.Now().After(until) {
			l.lost(value)
			return false, err
		}
		return true, err
	}
	defer done()
	sent := time.Now()
	n, err := renewScript.Run(rctx, l.client, []string{l.cfg.Key}, value, l.cfg.TTL.Milliseconds()).Int()
	if err != nil {
		err = fmt.Errorf("renew the lease %s: %w", l.cfg.Key, redisconn.Classify(err))
		if time.Now().After(until) {
			l.lost(value)
			return false, err
		}
		return true, err
	}
	if n != 1 {
		l.lost(value)
		return false, nil
	}
	l.mu.Lock()
	if l.value == value {
		l.validUntil = sent.Add(l.cfg.TTL)
	}
	l.mu.Unlock()
	return true, nil
}

// watch waits until neither an append transaction nor a renewal of this
// process is in flight, and holds that until done is called (see
// Lease.watched). Waiters are served in turn, as a channel serves its
// blocked senders, so back-to-back appends do not starve a renewal.
func (l *Lease) watch(ctx context.Context) (done func(), err error) {
	select {
	case l.watched <- struct{}{}:
		return func() { <-l.watched }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Release gives the lease up when this process still holds it, so that a
// standby takes over at once instead of when it expires. Safe to call when
// the lease is lost: another relay's lease is left alone.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	value, tried := l.value, l.tried
	l.value, l.tried, l.fence = "", "", ""
	l.mu.Unlock()
	if value == "" && tried != "" {
		// A take whose reply was lost may still hold it.
		cur, err := l.client.Get(ctx, l.cfg.Key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("release the lease %s: %w", l.cfg.Key, redisconn.Classify(err))
		}
		if tokenOf(cur) == tried {
			value = cur
		}
	}
	if value == "" {
		return nil
	}
	if err := releaseScript.Run(ctx, l.client, []string{l.cfg.Key}, value).Err(); err != nil {
		return fmt.Errorf("release the lease %s: %w", l.cfg.Key, redisconn.Classify(err))
	}
	return nil
}

// holderOf names the holder of a stored lease; a value that is not a lease
// of binlog-outbox is shown as it is, shortened.
func holderOf(value string) string {
	var info LeaseInfo
	if err := json.Unmarshal([]byte(value), &info); err != nil || info.Holder == "" {
		return fmt.Sprintf("%q", logging.Truncate(value, 60))
	}
	return info.String()
}

// ReadLease reads the lease kept under key and how long it has left, for
// status. ok is false when nobody holds it.
func ReadLease(ctx context.Context, client redis.UniversalClient, key string) (info LeaseInfo, ttl time.Duration, ok bool, err error) {
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	// One round trip, not a MULTI: the relay's ACL has no +multi, and a
	// lease that expires between the two reads shows as none.
	_, err = client.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		return nil
	})
	if errors.Is(get.Err(), redis.Nil) {
		return LeaseInfo{}, 0, false, nil
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return LeaseInfo{}, 0, false, fmt.Errorf("read the lease %s: %w", key, redisconn.Classify(err))
	}
	if pttl.Val() < 0 {
		return LeaseInfo{}, 0, false, nil
	}
	if err := json.Unmarshal([]byte(get.Val()), &info); err != nil {
		return LeaseInfo{}, 0, false, fmt.Errorf("the lease at %s is not a lease of binlog-outbox (%q): %w", key, logging.Truncate(get.Val(), 60), err)
	}
	return info, pttl.Val(), true, nil
}

// leaseLost returns outbox.ErrLeaseLost when the sink checks a lease (held
// as lease when the script ran) and the stored one is no longer it, for an
// append whose reply was lost; nil when it is still this relay's or no lease
// is checked. When it cannot be read it returns that error, which the
// reader retries: reporting a fence on a guess would stop the relay.
func (s *base) leaseLost(ctx context.Context, lease string) error {
	if lease == "" {
		return nil
	}
	cur, err := s.client.Get(ctx, s.cfg.Lease.Key()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("the position moved and the lease could not be read: %w", redisconn.Classify(err))
	}
	if cur == lease {
		return nil
	}
	s.cfg.Lease.lost(lease)
	return fmt.Errorf("%w: it is held by %s", outbox.ErrLeaseLost, holderOrNobody(cur))
}

// holderOrNobody names the holder of a stored lease, "" being none.
func holderOrNobody(value string) string {
	if value == "" {
		return "nobody (it expired)"
	}
	return holderOf(value)
}
