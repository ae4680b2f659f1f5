package memory

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// TestConsumerExtractsOnlyCompletedTurns: turns that failed, were cancelled or were interrupted
// (their orchestrator died) are acknowledged without a model call; completed turns, and events
// of releases that did not say the status, are extracted.
func TestConsumerExtractsOnlyCompletedTurns(t *testing.T) {
	names, connect := testNATS(t)
	var calls atomic.Int64
	mc, _ := scriptedModel(t, oneMemoryPerTurn(&calls))
	svc := newReplica(t, sharedStores(t, 0), consumerConfig(), mc)
	_, js := connect()
	c, err := StartConsumer(ctxT(t), svc, js, names, testKeyring(t), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(5 * time.Second)
	const user = "status-user"
	for i, st := range []orchestratorv1.TurnStatus{
		orchestratorv1.TurnStatus_TURN_STATUS_FAILED,
		orchestratorv1.TurnStatus_TURN_STATUS_CANCELLED,
		orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED,
		orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED,
		orchestratorv1.TurnStatus_TURN_STATUS_UNSPECIFIED,
	} {
		tf := turn(user, "s", userSays(fmt.Sprintf("记住我的爱好编号%03d号是第%d种", i*37+11, i)))
		tf.Status = st
		if err := events.PublishTurnFinished(ctxT(t), js, names, tf, events.SignWith(testKeyring(t))); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.Consumer(ctxT(t), names.Stream, names.ExtractorConsumer)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "every event acknowledged", func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Consumer >= 5
	})
	if n := calls.Load(); n != 2 {
		t.Errorf("%d extraction calls, want 2 (the completed turn and the one without a status)", n)
	}
	if got := listAll(t, svc, user); len(got) != 2 {
		t.Errorf("%d memories, want 2: %v", len(got), got)
	}
}
