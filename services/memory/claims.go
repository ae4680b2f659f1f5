package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hermes-agent/hermes/internal/lease"
)

// claims is the part of a StateStore that is leases (internal/lease): a turn's extraction claim,
// completed into its record, and the named locks of maintenance. Both state stores keep them
// this way; only the lease stores differ.
type claims struct {
	// turns holds the claims and records of turns under turnKey's keys.
	turns   lease.Store
	turnKey func(userID, turnID string) string
	// locks holds the named locks.
	locks lease.Store
}

// ClaimTurn implements StateStore.
func (c claims) ClaimTurn(ctx context.Context, userID, turnID string, ttl time.Duration) (*TurnRecord, bool, string, error) {
	token := randomToken()
	cl, err := c.turns.Acquire(ctx, c.turnKey(userID, turnID), token, nil, ttl)
	if err != nil {
		return nil, false, "", fmt.Errorf("claim turn: %w", err)
	}
	switch cl.State {
	case lease.Acquired:
		return nil, false, token, nil
	case lease.Done:
		var rec TurnRecord
		if err := json.Unmarshal(cl.Data, &rec); err != nil {
			return nil, false, "", fmt.Errorf("turn record: %w", err)
		}
		return &rec, false, "", nil
	default:
		return nil, true, "", nil
	}
}

// FinishTurn implements StateStore.
func (c claims) FinishTurn(ctx context.Context, userID, turnID, token string, rec TurnRecord, ttl time.Duration) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	key := c.turnKey(userID, turnID)
	ok, err := c.turns.Complete(ctx, key, token, b, ttl)
	if err != nil || ok {
		return err
	}
	// The claim lapsed while the turn was extracted. Its memories are written, so record the
	// turn unless another worker has claimed or recorded it meanwhile.
	cl, err := c.turns.Acquire(ctx, key, token, nil, ttl)
	if err != nil || cl.State != lease.Acquired {
		return err
	}
	_, err = c.turns.Complete(ctx, key, token, b, ttl)
	return err
}

// ReleaseTurn implements StateStore.
func (c claims) ReleaseTurn(ctx context.Context, userID, turnID, token string) error {
	_, err := c.turns.Release(ctx, c.turnKey(userID, turnID), token)
	return err
}

// Lock implements StateStore.
func (c claims) Lock(ctx context.Context, name string, ttl time.Duration) (func(), bool, error) {
	token := randomToken()
	cl, err := c.locks.Acquire(ctx, name, token, nil, ttl)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	if cl.State != lease.Acquired {
		return nil, false, nil
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = c.locks.Release(ctx, name, token)
	}, true, nil
}
