package redisconn

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// DefaultTimeout is the read and write timeout of the relay's Redis client.
// A batch script on a slow disk with appendfsync always can take a while; a
// short read timeout would turn a slow success into an uncertain error.
const DefaultTimeout = 30 * time.Second

// defaultDialTimeout applies when the URL sets no dial_timeout.
const defaultDialTimeout = 5 * time.Second

// NewClient opens a client for a --redis-url (ParseTarget: one server or a
// master found through Sentinel) with the settings the relay needs
// (ClientOptions with DefaultTimeout): no automatic retries (see New) and
// bounded timeouts, 5s to connect and 30s per command unless the URL says
// otherwise (?dial_timeout=1s&read_timeout=2s&write_timeout=2s).
func NewClient(url string) (*redis.Client, error) {
	t, err := ParseTarget(url, "")
	if errors.Is(err, outbox.ErrConfig) {
		return nil, err
	}
	if err != nil {
		return nil, outbox.WithHint(fmt.Errorf("%w: parse --redis-url: %v", outbox.ErrConfig, redactErr(err, url)),
			"use redis://[user:password@]host:port/db, or rediss:// for TLS")
	}
	return t.NewClient(DefaultTimeout), nil
}

// DefaultClusterReload is how often a cluster client reads the slot map
// again while it is used. go-redis reloads it on MOVED replies only (and
// every minute by default): after a master died, the client would dial the
// dead address for up to a minute, as no reply redirects it. Reading it
// each second costs one CLUSTER SLOTS and lets the relay follow a failover
// within a second of the cluster's.
const DefaultClusterReload = time.Second

// NewClusterClientFromOptions opens a Redis Cluster client (--redis-cluster)
// with the settings of ClientOptions (no CLIENT SETINFO included). It follows MOVED and ASK redirects,
// as a failover needs, and retries a command whose reply it lost: the
// append scripts compare-and-set a position, so a second run of one that
// ran is refused and recognised (Sink.Append).
func NewClusterClientFromOptions(o *redis.ClusterOptions) *redis.ClusterClient {
	c := *o
	c.MaxRetries = -1
	setTimeouts(&c.DialTimeout, &c.ReadTimeout, &c.WriteTimeout, DefaultTimeout)
	c.ContextTimeoutEnabled = true
	c.DisableIdentity = true
	if c.ClusterStateReloadInterval == 0 {
		c.ClusterStateReloadInterval = DefaultClusterReload
	}
	return redis.NewClusterClient(&c)
}

// ClientOptions sets on o (parsed from a URL or built by hand) what every
// Redis client of binlog-outbox uses, and returns it: no automatic retries
// (see New: a retried script whose reply was lost appends twice, and a
// check should report the one failure it saw), a dial timeout of 5s unless o
// has one, read and write timeouts of timeout, and context deadlines honoured
// on the socket as well. A caller that must answer fast (a preflight check)
// passes a shorter timeout than DefaultTimeout. Nor does it send CLIENT
// SETINFO on each connection, as go-redis does by default: Redis 7.2 and
// later, Valkey and their sentinels refuse it to a user with the relay's
// rules (ACLRules, SentinelACLRules) and log each refusal in ACL LOG, and
// the rules cannot grant it, as Redis 7.0 refuses a rule for a command it
// does not know (TestRedisACL, TestSentinel_Commands on Redis 8).
func ClientOptions(o *redis.Options, timeout time.Duration) *redis.Options {
	o.MaxRetries = -1
	setTimeouts(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, timeout)
	o.ContextTimeoutEnabled = true
	o.DisableIdentity = true
	return o
}

// setTimeouts sets those of a client's timeouts that are unset: dial to
// 5s, read and write to timeout. A batch script on a slow disk with
// appendfsync always can take a while; a short read timeout would turn a
// slow success into an uncertain error. An operator who wants a silently
// dead Redis noticed sooner (or the fault suite, which stalls the link)
// sets it in the URL.
func setTimeouts(dial, read, write *time.Duration, timeout time.Duration) {
	if *dial == 0 {
		*dial = defaultDialTimeout
	}
	if *read == 0 {
		*read = timeout
	}
	if *write == 0 {
		*write = timeout
	}
}

// redactErr keeps a URL's password out of an error message.
func redactErr(err error, url string) string {
	msg := err.Error()
	if at := strings.LastIndexByte(url, '@'); at > 0 {
		if scheme := strings.Index(url, "://"); scheme >= 0 && scheme+3 < at {
			userinfo := url[scheme+3 : at]
			if _, pw, ok := strings.Cut(userinfo, ":"); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
	}
	return msg
}
