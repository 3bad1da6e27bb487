package memory

import (
	"context"
	"math/rand/v2"
	"time"
)

type backoffPolicy struct {
	attempts     int
	initial, max time.Duration
}

// backoff yields exponentially growing delays with jitter: each delay is
// drawn from [d/2, d], d doubling from initial up to max, so clients that
// lost the same server do not come back in step.
type backoff struct {
	policy backoffPolicy
	next   time.Duration
}

func (p backoffPolicy) start() *backoff { return &backoff{policy: p, next: p.initial} }

func (b *backoff) delay() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.policy.max)
	half := d / 2
	return half + rand.N(d-half+1)
}

func (b *backoff) reset() { b.next = b.policy.initial }

// sleep waits d or until ctx is done; it reports whether the wait ran out.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
