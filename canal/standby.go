package canal

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
	"github.com/binlog-outbox/binlog-outbox/internal/retry"
)

// Lease is the lease of the position: of the relays of one position, the one
// that holds it reads, the others wait. The sink checks it with every append
// (redisstream.Lease implements both sides), so the reader's own view of it
// only decides when to read and when to wait, never whether an append is
// safe.
type Lease interface {
	// TryAcquire takes the lease, with a new token, when nobody holds it.
	// It reports whether this process holds it now and, when not, who
	// does ("" when nobody: try again).
	TryAcquire(ctx context.Context) (held bool, holder string, err error)
	// Renew extends the lease this process holds. held false means it is
	// lost (taken by another relay, expired, or not renewed in time, err
	// then saying why); an error with held true leaves it valid for now,
	// and the next call tries again.
	Renew(ctx context.Context) (held bool, err error)
	// Release gives the lease up if this process still holds it, so that a
	// standby takes over at once. It leaves another relay's lease alone.
	Release(ctx context.Context) error
}

// standby runs the reader whenever it holds the lease: it waits for the
// lease, reads while it holds it, and goes back to waiting when it loses it.
// It returns when ctx is cancelled (nil) or on a final error while holding
// the lease, which it gives up first so that a standby can try.
func (r *Reader) standby(ctx context.Context) error {
	for {
		if err := r.waitLease(ctx); err != nil || ctx.Err() != nil {
			// A stop can come just after a take (or its lost reply):
			// give up what this process may hold, as lead does.
			r.releaseLease(ctx)
			return err
		}
		err := r.lead(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var down *stepDownError
		if errors.As(err, &down) {
			r.log.Warn("gave the lease up: reading or appending failed for "+down.failingFor.Round(time.Second).String()+"; a standby that can reach the servers takes over, or this relay takes the lease again",
				logging.KeyError, down.err, "failing_for", down.failingFor.Round(time.Millisecond))
			// The standbys try once per LeaseRenew: leave them two turns
			// before competing for the lease again.
			if !retry.Sleep(ctx, 2*r.cfg.LeaseRenew) {
				return nil
			}
			continue
		}
		if !errors.Is(err, outbox.ErrLeaseLost) {
			return err
		}
		r.log.Warn("lost the lease; stopped reading, nothing appended past the stored position; waiting to take it again", logging.KeyError, err)
	}
}

// stepDownError ends the holder's reading when it failed for
// Config.LeaseStepDown: the lease goes to a relay that may do better.
type stepDownError struct {
	failingFor time.Duration
	err        error // the last failure
}

func (e *stepDownError) Error() string {
	return fmt.Sprintf("failing for %s, giving the lease up: %v", e.failingFor.Round(time.Millisecond), e.err)
}

func (e *stepDownError) Unwrap() error { return e.err }

// waitLease returns once this process holds the lease, or when ctx is
// cancelled (nil) or Redis refuses it for good. It tries once per
// LeaseRenew, with jitter so that standbys do not ask in step, and says once
// per holder whom it waits for.
func (r *Reader) waitLease(ctx context.Context) error {
	var waitingFor string
	since := time.Now()
	failures := retry.New(r.log, retry.Config{Message: "cannot take the lease; retrying", MaxWait: r.cfg.LeaseRenew})
	for {
		held, holder, err := r.cfg.Lease.TryAcquire(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := jitter(r.cfg.LeaseRenew)
		switch {
		case err != nil:
			r.waiting.Store(false)
			var final error
			if wait, final = failures.Failed(err); final != nil {
				return final
			}
		case held:
			r.waiting.Store(false)
			failures.Progressed()
			attrs := []any{"holder", holder}
			if waitingFor != "" {
				attrs = append(attrs, "waited", time.Since(since).Round(time.Millisecond))
			}
			r.log.Info("took the lease; reading from the stored position", attrs...)
			return nil
		default:
			r.waiting.Store(true)
			failures.Progressed()
			if holder != "" && holder != waitingFor {
				r.log.Info("waiting for the lease held by "+holder, "holder", holder)
				waitingFor = holder
			}
		}
		if !retry.Sleep(ctx, wait) {
			return nil
		}
	}
}

// lead reads while this process holds the lease: it renews the lease on a
// goroutine of its own, so that a slow append cannot let it expire, and
// stops reading when a renewal finds it lost. It returns relay's error, or
// outbox.ErrLeaseLost when the renewals lost it; the lease is given up in
// every case, so that after a clean stop or a final error a standby takes
// over at once.
func (r *Reader) lead(ctx context.Context) error {
	lctx, cancel := context.WithCancelCause(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		r.renewLease(lctx, cancel)
	}()
	r.leader.Store(true)
	err := r.relay(lctx)
	r.leader.Store(false)
	cancel(nil)
	<-renewed
	r.releaseLease(ctx)
	if cause := context.Cause(lctx); errors.Is(cause, outbox.ErrLeaseLost) && ctx.Err() == nil {
		return cause
	}
	return err
}

// releaseLease gives the lease up, if this process holds it, even when ctx
// is done: a stop is when a standby needs it most.
func (r *Reader) releaseLease(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := r.cfg.Lease.Release(rctx); err != nil {
		r.log.Warn("could not give the lease up; a standby takes over when it expires", logging.KeyError, err)
	}
}

// renewLease renews the lease every LeaseRenew until ctx is done, and
// cancels ctx with outbox.ErrLeaseLost when a renewal finds it lost.
func (r *Reader) renewLease(ctx context.Context, cancel context.CancelCauseFunc) {
	failing := false
	retry.Every(ctx, r.cfg.LeaseRenew, func(ctx context.Context) bool {
		held, err := r.cfg.Lease.Renew(ctx)
		if ctx.Err() != nil {
			return false
		}
		if !held {
			if err != nil {
				cancel(fmt.Errorf("%w: not renewed before it expired: %w", outbox.ErrLeaseLost, err))
			} else {
				cancel(fmt.Errorf("%w: another relay took it, or it expired", outbox.ErrLeaseLost))
			}
			return false
		}
		switch {
		case err != nil && !failing:
			// Once per run of failures: the lease stays valid until its
			// TTL, and the loss, if it comes, is logged on its own.
			attrs := []any{logging.KeyError, err}
			if hint := outbox.HintOf(err); hint != "" {
				attrs = append(attrs, logging.KeyHint, hint)
			}
			r.log.Warn("renewing the lease failed; retrying until it expires", attrs...)
			failing = true
		case err == nil && failing:
			r.log.Info("renewed the lease again")
			failing = false
		}
		return true
	})
}

// jitter returns d give or take a quarter.
func jitter(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2+1)
}
