package redisconn

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Classify adds an operator hint to the Redis errors an operator must act
// on (a full Redis, a replica, refused credentials or permissions, ...), for
// the commands that send their own Redis commands besides the sink's.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		// A command gives up, and a relay starting now would exit 1:
		// "the relay retries" (classify's) holds for a running relay only.
		return outbox.WithHint(err, "Redis is unreachable: start it, or fix host, port and password in --redis-url (redis-cli -u <url> PING tells); "+
			"a running relay retries until it is back, one starting now exits 1")
	}
	return classify(err)
}

// classify adds an operator hint to the Redis errors an operator must act on.
// Redis error replies start with an upper-case code (OOM, READONLY, NOAUTH,
// WRONGPASS, ...); that code is part of the protocol.
func classify(err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return outbox.WithHint(err, "Redis is unreachable; the relay retries and appends nothing until it is back")
	}
	code, _, _ := strings.Cut(rerr.Error(), " ")
	switch code {
	case "OOM":
		return outbox.WithHint(err, "Redis reached maxmemory; raise maxmemory or trim the streams consumers are done with (XTRIM); the relay retries and loses nothing")
	case "READONLY":
		return outbox.WithHint(err, "Redis answered as a read-only replica: --redis-url points at one (point it at the primary), or a Sentinel failover demoted the master (the relay reconnects to the new one)")
	case "NOAUTH", "WRONGPASS":
		return outbox.WithHint(err, "Redis refused the credentials; check the user in --redis-url and the password (in the URL or --redis-password-file)")
	case "NOPERM":
		return Denied(err, aclHint)
	case "WRONGTYPE":
		return outbox.WithHint(err, "a key the relay appends to is not a stream; rename or delete it, or change --stream")
	case "MISCONF":
		return outbox.WithHint(err, "Redis cannot persist (MISCONF); fix its disk or persistence settings")
	}
	return err
}
