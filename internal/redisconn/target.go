// Package redisconn connects binlog-outbox to Redis: which server a
// --redis-url names (one server, or a master found through Sentinel), the
// settings every client uses, the ACL rules the relay's user needs, the
// hints that Redis's error replies get for an operator, and listing keys on
// every master of a Redis Cluster (scan.go). Writing the relay's
// streams is redisstream's job, reading them for the operator's commands
// redisadmin's.
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// The --redis-url schemes of a master found through Redis Sentinel, without
// and with TLS (to the sentinels and the master alike).
const (
	SchemeSentinel    = "redis+sentinel"
	SchemeSentinelTLS = "rediss+sentinel"
)

// DefaultSentinelPort is the port of a sentinel address given without one.
const DefaultSentinelPort = "26379"

// sentinelURLHint is the form of a Sentinel URL, for every error about one.
const sentinelURLHint = "write it as redis+sentinel://[user:password@]host1:26379,host2:26379,host3:26379/<master name>[/<db>], " +
	"or rediss+sentinel:// for TLS; the user and password are the relay's on the master, the sentinels' come from --redis-sentinel-user and --redis-sentinel-password-file"

// Target is the Redis the relay appends to and how every client of a
// command connects to it: one server, or the master that a set of Redis
// Sentinels names. Commands open their clients with NewClient only, so
// that run, check and the commands beside them reach the same server in
// the same way, and none of them needs to know which kind it is.
type Target struct {
	// Options are the connection settings of the server or, with Sentinel,
	// of every master the sentinels name: user, password, database, TLS,
	// timeouts, pool. With Sentinel, Options.Addr is the first sentinel's
	// and unused.
	Options *redis.Options
	// Sentinel, when not nil, makes clients ask the sentinels for the
	// master's address on every new connection, and follow a failover.
	Sentinel *Sentinel
}

// Sentinel is where to find the master through Redis Sentinel.
type Sentinel struct {
	// Master is the name the sentinels monitor the master under (the
	// `sentinel monitor <name>` of their configuration).
	Master string
	// Addrs are the sentinels, host:port. Clients try them in turn and
	// learn the others from the one that answers.
	Addrs []string
	// Username and Password authenticate to the sentinels, which have
	// users and passwords of their own (requirepass or ACL in
	// sentinel.conf), apart from the master's in Options.
	Username, Password string
}

// ParseTarget parses --redis-url: redis:// or rediss:// for one server,
// redis+sentinel:// or rediss+sentinel:// for a master found through
// Sentinel (the hosts are the sentinels, the path's first segment the
// master's name, the second the database). master, when not "", is
// --redis-sentinel-master: it makes the hosts of a redis:// or rediss://
// URL sentinels and names the master. The user and password of the URL are
// the master's in both forms; the query takes go-redis's options
// (dial_timeout, read_timeout, pool_size, skip_verify, ...).
//
// Errors about the form wrap outbox.ErrConfig and never quote the URL; an
// error of go-redis's parser is returned as it is, and may quote it.
func ParseTarget(rawURL, master string) (*Target, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, errors.New("not a URL: it has no scheme://")
	}
	sentinel := scheme == SchemeSentinel || scheme == SchemeSentinelTLS
	if !sentinel && master == "" {
		if q := queryOf(rest); q.Has("master_name") {
			return nil, outbox.WithHint(fmt.Errorf("%w: --redis-url names a Sentinel master with ?master_name=, which the relay does not read", outbox.ErrConfig),
				"in that form (go-redis's) the user and password in the URL are the sentinels' and the master's travel in the query, where logs show them; %s", sentinelURLHint)
		}
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, err
		}
		return &Target{Options: o}, nil
	}
	if sentinel && master != "" {
		return nil, outbox.WithHint(fmt.Errorf("%w: --redis-sentinel-master is set and the %s:// URL names a master too", outbox.ErrConfig, scheme),
			"name the master in one place: in the URL's path (redis+sentinel://hosts/<master>/<db>), or with --redis-sentinel-master and a redis:// URL of the sentinels")
	}
	u, hosts, err := parseHosts(scheme, rest)
	if err != nil {
		return nil, err
	}
	segs := strings.Split(strings.Trim(u.EscapedPath(), "/"), "/")
	if segs[0] == "" {
		segs = nil
	}
	var db string
	if sentinel {
		if len(segs) == 0 || len(segs) > 2 {
			return nil, outbox.WithHint(fmt.Errorf("%w: the %s:// URL's path must be /<master name> or /<master name>/<db>", outbox.ErrConfig, scheme), "%s", sentinelURLHint)
		}
		if master, err = url.PathUnescape(segs[0]); err != nil || master == "" {
			return nil, outbox.WithHint(fmt.Errorf("%w: the %s:// URL's master name does not parse", outbox.ErrConfig, scheme), "%s", sentinelURLHint)
		}
		segs = segs[1:]
	}
	if len(segs) > 1 {
		return nil, outbox.WithHint(fmt.Errorf("%w: --redis-url's path must be /<db> with --redis-sentinel-master", outbox.ErrConfig), "write it as redis://host1:26379,host2:26379/<db>")
	}
	if len(segs) == 1 {
		db = "/" + segs[0]
	}
	addrs, err := sentinelAddrs(hosts)
	if err != nil {
		return nil, err
	}
	// go-redis parses the rest as for one server: the master's user and
	// password, the database, TLS and the query's options.
	plain := url.URL{Scheme: strings.TrimSuffix(scheme, "+sentinel"), User: u.User, Host: addrs[0], Path: db, RawQuery: u.RawQuery}
	o, err := redis.ParseURL(plain.String())
	if err != nil {
		return nil, err
	}
	if o.TLSConfig != nil {
		// The master's address changes on a failover: each certificate is
		// verified for the address dialled (the sentinel's, the master's
		// the sentinels give), unless --redis-tls-server-name names one.
		o.TLSConfig.ServerName = ""
	}
	return &Target{Options: o, Sentinel: &Sentinel{Master: master, Addrs: addrs}}, nil
}

// hostsPlaceholder stands for a URL's hosts while net/url parses it.
const hostsPlaceholder = "hosts.invalid"

// parseHosts parses a URL given as its scheme and the text after "://".
// net/url takes one host with a port, and a Sentinel URL's are a list, with
// or without ports: they are cut out (the text between the user
// information and the path, query or fragment) and returned as they are,
// and the URL parses with hostsPlaceholder in their place.
func parseHosts(scheme, rest string) (u *url.URL, hosts string, err error) {
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	start := strings.LastIndexByte(rest[:end], '@') + 1
	if u, err = url.Parse(scheme + "://" + rest[:start] + hostsPlaceholder + rest[end:]); err != nil {
		return nil, "", err
	}
	return u, rest[start:end], nil
}

// SetURLPassword returns a --redis-url of any form (redis://, rediss://,
// redis+sentinel://, ...) with password as its password, keeping the user
// it names; had reports that it has a password already, and then it is
// returned as it is. The password is percent-encoded as the URL needs.
func SetURLPassword(rawURL, password string) (out string, had bool, err error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "", false, errors.New("not a URL: it has no scheme://")
	}
	u, hosts, err := parseHosts(scheme, rest)
	if err != nil {
		return "", false, err
	}
	if hosts == "" {
		return "", false, errors.New("the URL names no host")
	}
	if _, has := u.User.Password(); has {
		return rawURL, true, nil
	}
	u.User = url.UserPassword(u.User.Username(), password)
	// The placeholder follows the only unescaped '@' of the URL.
	return strings.Replace(u.String(), "@"+hostsPlaceholder, "@"+hosts, 1), false, nil
}

// queryOf returns the query of the text after a URL's scheme, empty when it
// does not parse (the URL's parser then reports the URL).
func queryOf(rest string) url.Values {
	_, query, _ := strings.Cut(rest, "?")
	query, _, _ = strings.Cut(query, "#")
	q, err := url.ParseQuery(query)
	if err != nil {
		return url.Values{}
	}
	return q
}

// sentinelAddrs splits the comma-separated sentinels of a URL's host,
// giving DefaultSentinelPort to those without a port.
func sentinelAddrs(hosts string) ([]string, error) {
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, outbox.WithHint(fmt.Errorf("%w: --redis-url names an empty sentinel address", outbox.ErrConfig), "%s", sentinelURLHint)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.Trim(h, "[]"), DefaultSentinelPort
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 || host == "" {
			return nil, outbox.WithHint(fmt.Errorf("%w: sentinel address %q in --redis-url is not host:port", outbox.ErrConfig, h), "%s", sentinelURLHint)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, nil
}

// NewClient opens a client of the target with the settings of
// ClientOptions: no automatic retries, bounded timeouts, timeout per
// command. With Sentinel it is go-redis's failover client, which asks the
// sentinels for the master's address on each new connection and drops its
// connections to a master the sentinels replaced; a demoted master's
// READONLY replies close the connection they came on, so the command after
// it reaches the new master. A client of a database the server does not
// have says so in its errors' hint (databaseHook). Close it when done.
func (t *Target) NewClient(timeout time.Duration) *redis.Client {
	c := t.client(timeout)
	if t.Options.DB != 0 {
		c.AddHook(&databaseHook{t: t, timeout: min(timeout, defaultDialTimeout)})
	}
	return c
}

// client is NewClient without the hook.
func (t *Target) client(timeout time.Duration) *redis.Client {
	o := *t.Options
	ClientOptions(&o, timeout)
	if t.Sentinel == nil {
		return redis.NewClient(&o)
	}
	return redis.NewFailoverClient(t.failoverOptions(&o))
}

// failoverOptions are the options of a failover client whose master
// connections have the settings of o: every field redis.ParseURL can set
// (see TestTarget_FailoverOptionsKeepEverySetting).
func (t *Target) failoverOptions(o *redis.Options) *redis.FailoverOptions {
	s := t.Sentinel
	return &redis.FailoverOptions{
		MasterName:       s.Master,
		SentinelAddrs:    append([]string(nil), s.Addrs...),
		SentinelUsername: s.Username,
		SentinelPassword: s.Password,

		ClientName:      o.ClientName,
		Protocol:        o.Protocol,
		DisableIdentity: o.DisableIdentity,
		Username:        o.Username,
		Password:        o.Password,
		DB:              o.DB,
		TLSConfig:       o.TLSConfig,

		MaxRetries:            o.MaxRetries,
		MinRetryBackoff:       o.MinRetryBackoff,
		MaxRetryBackoff:       o.MaxRetryBackoff,
		DialTimeout:           o.DialTimeout,
		DialerRetries:         o.DialerRetries,
		DialerRetryTimeout:    o.DialerRetryTimeout,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		ContextTimeoutEnabled: o.ContextTimeoutEnabled,

		PoolFIFO:                o.PoolFIFO,
		PoolSize:                o.PoolSize,
		PoolTimeout:             o.PoolTimeout,
		MinIdleConns:            o.MinIdleConns,
		MaxIdleConns:            o.MaxIdleConns,
		MaxActiveConns:          o.MaxActiveConns,
		MaxConcurrentDials:      o.MaxConcurrentDials,
		ConnMaxIdleTime:         o.ConnMaxIdleTime,
		ConnMaxLifetime:         o.ConnMaxLifetime,
		ConnMaxLifetimeJitter:   o.ConnMaxLifetimeJitter,
		PipelinePoolSize:        o.PipelinePoolSize,
		PipelineReadBufferSize:  o.PipelineReadBufferSize,
		PipelineWriteBufferSize: o.PipelineWriteBufferSize,
	}
}

// String describes the target for messages, without credentials:
// "127.0.0.1:6379", or `master "mymaster" of sentinels a:26379,b:26379`.
func (t *Target) String() string {
	if t.Sentinel == nil {
		return t.Options.Addr
	}
	return fmt.Sprintf("master %q of sentinels %s", t.Sentinel.Master, strings.Join(t.Sentinel.Addrs, ","))
}

// ErrUnknownMaster means the sentinels that answered monitor no master of
// the configured name.
var ErrUnknownMaster = outbox.NewConfigError("the sentinels know no master of that name")

// ErrNoSentinel means no sentinel of the configured ones answered.
var ErrNoSentinel = errors.New("no sentinel answered")

// MasterAddr asks the sentinels in the order given, each for at most
// timeout, for the master's address, as a client does before it connects,
// but one at a time, so that it can tell why none gave one: the name is
// unknown to every sentinel that answered (ErrUnknownMaster, with the
// names they monitor when they may list them), or none answered
// (ErrNoSentinel, with each one's error). o gives the TLS configuration and
// the dial timeout; each sentinel gets at most timeout to answer. It
// returns the address and the sentinel that gave it.
func (s *Sentinel) MasterAddr(ctx context.Context, o *redis.Options, timeout time.Duration) (addr, from string, err error) {
	var failures []string
	var unknown, known []string
	authFailed := false
	for _, sa := range s.Addrs {
		so := redis.Options{Addr: sa, Username: s.Username, Password: s.Password, TLSConfig: o.TLSConfig, DialTimeout: o.DialTimeout, Protocol: o.Protocol}
		c := redis.NewSentinelClient(ClientOptions(&so, timeout))
		// A silent sentinel (a dropped SYN) must leave time for the next.
		sctx, cancel := context.WithTimeout(ctx, timeout)
		got, err := c.GetMasterAddrByName(sctx, s.Master).Result()
		cancel()
		switch {
		case err == nil && len(got) == 2:
			c.Close()
			return net.JoinHostPort(got[0], got[1]), sa, nil
		case err == nil:
			failures = append(failures, fmt.Sprintf("%s: unexpected reply %q", sa, got))
		case errors.Is(err, redis.Nil):
			unknown = append(unknown, sa)
			if known == nil {
				known = monitored(ctx, c)
			}
		default:
			failures = append(failures, sa+": "+err.Error())
			authFailed = authFailed || refusedCredentials(err)
		}
		c.Close()
		if ctx.Err() != nil {
			break
		}
	}
	if len(unknown) > 0 {
		names := "they may not list the names they monitor (SENTINEL MASTERS)"
		if len(known) > 0 {
			names = "they monitor " + strings.Join(known, ", ")
		}
		return "", "", outbox.WithHint(fmt.Errorf("%w: sentinel %s knows no master named %q", ErrUnknownMaster, strings.Join(unknown, ", "), s.Master),
			"name the master as the sentinels' `sentinel monitor <name> ...` line does (%s): redis+sentinel://hosts/<name>/<db> or --redis-sentinel-master", names)
	}
	hint := "check the sentinel addresses in --redis-url (sentinels listen on 26379 by default) and that they run and accept connections from this host"
	if authFailed {
		hint = "the sentinels refused the credentials: they have their own (requirepass or ACL in sentinel.conf), which the relay gives with --redis-sentinel-user and --redis-sentinel-password-file"
	}
	return "", "", outbox.WithHint(fmt.Errorf("%w: %s", ErrNoSentinel, strings.Join(failures, "; ")), "%s", hint)
}

// monitored returns the names of the masters a sentinel monitors, nil when
// it does not say (an ACL without SENTINEL MASTERS).
func monitored(ctx context.Context, c *redis.SentinelClient) []string {
	masters, err := c.Masters(ctx).Result()
	if err != nil {
		return nil
	}
	var names []string
	for _, m := range masters {
		fields := toStrings(m)
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "name" {
				names = append(names, strconv.Quote(fields[i+1]))
			}
		}
	}
	return names
}

// toStrings flattens one SENTINEL MASTERS entry, a RESP2 array of names and
// values or a RESP3 map, into name, value, name, value, ...
func toStrings(v any) []string {
	var out []string
	switch m := v.(type) {
	case []any:
		for _, x := range m {
			out = append(out, fmt.Sprint(x))
		}
	case map[any]any:
		for k, x := range m {
			out = append(out, fmt.Sprint(k), fmt.Sprint(x))
		}
	}
	return out
}

// refusedCredentials reports whether err is a sentinel's refusal of the
// credentials or of a command. The codes are the protocol's error prefixes.
func refusedCredentials(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	code, _, _ := strings.Cut(rerr.Error(), " ")
	return code == "NOAUTH" || code == "WRONGPASS" || code == "NOPERM"
}
