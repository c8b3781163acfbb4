package redisconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// NoDatabaseHint is the fix for a --redis-url whose database (/N) the
// server does not have.
func NoDatabaseHint(db int) string {
	return fmt.Sprintf("Redis has no database %d (redis.conf's databases, 16 by default, counts them; a Redis Cluster has only 0): "+
		"end --redis-url with /0 or another database the server has", db)
}

// databaseHook gives the replies of a client whose database the server
// does not have NoDatabaseHint. Each new connection SELECTs the database,
// and the server's refusal ("ERR DB index is out of range") reaches the
// command that asked for the connection, whichever it is: without the hook
// every command but check and run showed the raw reply. A reply of code
// ERR makes the hook ask the server once, as check does, whether database
// 0 answers where the client's refuses; its answer holds for the client's
// life (a server's count of databases is set at its start).
type databaseHook struct {
	t *Target
	// timeout bounds the probe.
	timeout time.Duration

	once    sync.Once
	missing bool
}

// DialHook implements redis.Hook.
func (h *databaseHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *databaseHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.refused(ctx, err) {
			err = h.wrap(err)
			cmd.SetErr(err)
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *databaseHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !h.refused(ctx, err) {
			return err
		}
		for _, c := range cmds {
			if c.Err() != nil {
				c.SetErr(h.wrap(c.Err()))
			}
		}
		return h.wrap(err)
	}
}

// wrap makes err, the server's refusal of the client's database, a
// configuration error (exit code 2) with NoDatabaseHint.
func (h *databaseHook) wrap(err error) error {
	return outbox.WithHint(noDatabaseError{err}, "%s", NoDatabaseHint(h.t.Options.DB))
}

// noDatabaseError is a refusal of the client's database: its text is
// Redis's, and it is an outbox.ErrConfig.
type noDatabaseError struct{ error }

func (e noDatabaseError) Unwrap() error { return e.error }

// Is makes the error an outbox.ErrConfig.
func (e noDatabaseError) Is(target error) bool { return target == outbox.ErrConfig }

// refused reports whether err is the server's refusal of the client's
// database.
func (h *databaseHook) refused(ctx context.Context, err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) || outbox.HintOf(err) != "" {
		return false
	}
	if code, _, _ := strings.Cut(rerr.Error(), " "); code != "ERR" {
		return false
	}
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.timeout)
		defer cancel()
		h.missing = h.t.MissingDatabase(ctx)
	})
	return h.missing
}

// MissingDatabase reports whether t's server refuses t's database while it
// answers on database 0: the database is then beyond the server's count.
func (t *Target) MissingDatabase(ctx context.Context) bool {
	if t.Options.DB == 0 {
		return false
	}
	on := func(db int) error {
		z := *t
		o := *t.Options
		o.DB = db
		z.Options = &o
		c := z.client(defaultDialTimeout)
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	if on(0) != nil {
		return false
	}
	var rerr redis.Error
	return errors.As(on(t.Options.DB), &rerr)
}
