package canal

import (
	"context"
	"fmt"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/retry"
)

// ServerIDClaim is the relay's claim on its server id, which keeps relays of
// other positions from reading with it: the server drops the older of two
// binlog connections with one id, again and again, and both relays stall.
// redisstream.ServerIDClaimer implements it; relays of one position share
// the id and take turns by the lease.
type ServerIDClaim interface {
	// Claim takes or renews the claim. taken false means a relay of
	// another position holds it (other names it) and nothing changed.
	Claim(ctx context.Context) (other string, taken bool, err error)
	// Renewal is how often the holder renews the claim, well within its
	// expiry.
	Renewal() time.Duration
	// Release gives the claim up if this relay still holds it.
	Release(ctx context.Context) error
}

// releaseServerID gives the claim up when the reader stops, even when ctx
// is done, so that a relay of another position configured with the same id
// (the benchmark's workloads, one after the other) starts at once.
func (r *Reader) releaseServerID(ctx context.Context) {
	if r.cfg.ServerIDClaim == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := r.cfg.ServerIDClaim.Release(rctx); err != nil {
		r.log.Warn("could not give the server id claim up; it expires within 30s", logging.KeyError, err)
	}
}

// claimServerID takes the claim on the relay's server id before a binlog
// connection opens with it. A relay of another position holding it is a
// final error: this relay opens no connection, so the other reads on.
func (r *Reader) claimServerID(ctx context.Context) error {
	if r.cfg.ServerIDClaim == nil {
		return nil
	}
	other, taken, err := r.cfg.ServerIDClaim.Claim(ctx)
	if err != nil || taken {
		return err
	}
	if r.cfg.Lease != nil {
		return r.serverIDTaken(other)
	}
	// Without the lease the claim refuses a twin of this relay too; the
	// one refusing it may be this relay's own dead process, whose claim
	// expires within its TTL: wait that long first, as a lease holder's
	// restart waits for its lease.
	wait := 4 * r.cfg.ServerIDClaim.Renewal()
	r.log.Warn("waiting for another relay's claim of the server id to end; a relay that died gives it up within its TTL",
		"server_id", r.cfg.ServerID, "holder", other, "up_to", wait.Round(time.Second))
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if !retry.Sleep(ctx, r.cfg.ServerIDClaim.Renewal()/4) {
			return ctx.Err()
		}
		if other, taken, err = r.cfg.ServerIDClaim.Claim(ctx); err != nil || taken {
			return err
		}
	}
	return r.serverIDTaken(other)
}

func (r *Reader) serverIDTaken(other string) error {
	return outbox.WithHint(fmt.Errorf("%w: server id %d is in use by %s; this relay opened no binlog connection with it, so that relay reads on undisturbed",
		outbox.ErrConfig, r.cfg.ServerID, other),
		"give this relay a --server-id of its own (no server, replica or other relay may use it), or leave --server-id unset: the default differs per host name and position key; "+
			"a relay without --lease reads its position alone: stop the other, or run both with --lease (the default) to take turns; "+
			"if that relay has stopped, its claim expires within 30s")
}

// renewServerID renews the claim every Renewal while the session runs, and
// ends the session (cancel) when a relay of another position took the id.
func (r *Reader) renewServerID(ctx context.Context, cancel context.CancelFunc) {
	if r.cfg.ServerIDClaim == nil {
		return
	}
	retry.Every(ctx, r.cfg.ServerIDClaim.Renewal(), func(ctx context.Context) bool {
		other, taken, err := r.cfg.ServerIDClaim.Claim(ctx)
		switch {
		case ctx.Err() != nil:
			return false
		case err != nil:
			// The claim outlives a few failed renewals; the next tries again.
			r.log.Debug("renewing the server id claim failed", logging.KeyError, err)
		case !taken:
			r.log.Warn("another relay took the server id while this one read; stopping this session", "server_id", r.cfg.ServerID, "holder", other)
			cancel()
			return false
		}
		return true
	})
}
