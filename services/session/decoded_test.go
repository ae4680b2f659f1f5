package session

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/boltstore"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// decodedFixture is a store whose group commits only when the test says, the session under
// test, and the messages of the last load by seq.
type decodedFixture struct {
	t    *testing.T
	s    *BoltStore
	sid  string
	dctx context.Context
	last map[int64]*sessionv1.Message
	n    int
}

func (f *decodedFixture) append(ctx context.Context, m *sessionv1.Message) {
	f.t.Helper()
	f.n++
	if _, err := f.s.Append(ctx, "alice", f.sid, []AppendItem{item(m, fmt.Sprintf("c%d", f.n))}, nil); err != nil {
		f.t.Fatal(err)
	}
}

func (f *decodedFixture) commit() {
	f.t.Helper()
	if err := f.s.group.Update(func(*bolt.Tx) error { return nil }); err != nil {
		f.t.Fatal(err)
	}
}

// fresh loads the committed context decoding every message anew.
func (f *decodedFixture) fresh() *ContextData {
	f.t.Helper()
	plain := &BoltStore{db: f.s.db, decoded: newDecodedCache(0)}
	d, err := plain.LoadContext(ctx, f.sid, 2, 3)
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

// check compares d (a load through the cache) with want (decoded anew), and checks that a
// message is the previous load's object exactly when the previous load had the same message.
func (f *decodedFixture) check(step string, d, want *ContextData) {
	f.t.Helper()
	if diff := cmp.Diff(want, d, protocmp.Transform()); diff != "" {
		f.t.Fatalf("%s: context through the cache differs (-fresh +cached):\n%s", step, diff)
	}
	seen := map[int64]*sessionv1.Message{}
	for _, ms := range [][]*sessionv1.Message{d.Window, d.Sticky, d.Evicted} {
		for _, m := range ms {
			prev, ok := f.last[m.GetSeq()]
			switch {
			case ok && proto.Equal(prev, m) && prev != m:
				f.t.Errorf("%s: message %d unchanged since the last load but decoded again", step, m.GetSeq())
			case ok && !proto.Equal(prev, m) && prev == m:
				f.t.Errorf("%s: message %d changed but the cached one was used", step, m.GetSeq())
			}
			seen[m.GetSeq()] = m
		}
	}
	f.last = seen
}

func (f *decodedFixture) load(step string) {
	f.t.Helper()
	d, err := f.s.LoadContext(ctx, f.sid, 2, 3)
	if err != nil {
		f.t.Fatal(err)
	}
	f.check(step, d, f.fresh())
}

// TestDecodedCache runs writes of every kind between context loads and checks that each load
// through the cache equals one that decodes every message anew, and that the cache served
// exactly the messages whose stored bytes did not change.
func TestDecodedCache(t *testing.T) {
	turn := func(f *decodedFixture, i int) {
		f.append(ctx, user(fmt.Sprintf("question %d", i)))
		f.append(ctx, assistant(fmt.Sprintf("answer %d", i)))
	}
	cases := []struct {
		name string
		run  func(f *decodedFixture)
	}{
		{"appends slide the window", func(f *decodedFixture) {
			for i := range 6 {
				turn(f, i)
				f.load(fmt.Sprintf("turn %d", i))
			}
		}},
		{"sticky and evicted messages", func(f *decodedFixture) {
			m := user("remember this")
			m.Sticky = true
			f.append(ctx, m)
			for i := range 5 {
				turn(f, i)
				f.load(fmt.Sprintf("turn %d", i))
			}
		}},
		{"summary moves the evicted range", func(f *decodedFixture) {
			for i := range 5 {
				turn(f, i)
			}
			f.load("before")
			if _, err := f.s.UpdateSummary(ctx, f.sid, &Summary{Content: "so far", ThroughSeq: 3}); err != nil {
				t.Fatal(err)
			}
			f.load("after the summary")
			turn(f, 5)
			f.load("next turn")
		}},
		{"deferred append loads the open transaction", func(f *decodedFixture) {
			turn(f, 0)
			f.load("committed")
			f.n++
			_, d, err := f.s.AppendLoad(f.dctx, "alice", f.sid, []AppendItem{item(user("deferred"), fmt.Sprintf("c%d", f.n))}, nil, 2, 3)
			if err != nil {
				t.Fatal(err)
			}
			f.commit()
			f.check("deferred AppendLoad", d, f.fresh())
			f.load("after the commit")
		}},
		{"rollback loses the deferred writes, their seqs are used again", func(f *decodedFixture) {
			turn(f, 0)
			f.load("committed")
			f.n++
			_, d, err := f.s.AppendLoad(f.dctx, "alice", f.sid, []AppendItem{item(user("lost"), fmt.Sprintf("c%d", f.n))}, nil, 2, 3)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Window[len(d.Window)-1].GetContent(); got != "lost" {
				t.Fatalf("deferred AppendLoad's window ends with %q", got)
			}
			f.last = map[int64]*sessionv1.Message{}
			for _, m := range d.Window {
				f.last[m.GetSeq()] = m
			}
			// A deferred write that cannot be applied again: when the one after it fails and
			// rolls the open transaction back, the next transaction drops every deferred write.
			if err := f.s.group.Defer(func(_ *bolt.Tx, again bool) error {
				if again {
					return errors.New("cannot apply again")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := f.s.group.Defer(func(*bolt.Tx, bool) error { return errors.New("fails") }); err == nil {
				t.Fatal("failing deferred write: no error")
			}
			f.append(ctx, user("kept"))
			f.load("the lost message's seq holds another")
		}},
		{"message rewritten in place", func(f *decodedFixture) {
			for i := range 3 {
				turn(f, i)
			}
			f.load("before")
			err := f.s.group.Update(func(tx *bolt.Tx) error {
				msgs := partsOf(tx.Bucket(sessionBucketName(f.sid))).msgs
				k := seqKey(6)
				m := &sessionv1.Message{}
				if err := proto.Unmarshal(msgs.Get(k), m); err != nil {
					return err
				}
				m.Content = "rewritten"
				raw, err := proto.Marshal(m)
				if err != nil {
					return err
				}
				return msgs.Put(k, raw)
			})
			if err != nil {
				t.Fatal(err)
			}
			f.load("after")
		}},
		{"session deleted and created again under its id", func(f *decodedFixture) {
			for i := range 3 {
				turn(f, i)
			}
			f.load("before")
			if _, err := f.s.DeleteSession(ctx, "alice", f.sid); err != nil {
				t.Fatal(err)
			}
			now := timestamppb.Now()
			err := f.s.CreateSession(ctx, &sessionv1.Session{Id: f.sid, UserId: "alice", CreatedAt: now, State: &sessionv1.SessionState{UpdatedAt: now}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				turn(f, i+10)
			}
			f.load("after")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openBolt(t, filepath.Join(t.TempDir(), "s.db"), manualFlush)
			defer s.Close()
			s.group = boltstore.NewGroupDelay(s.db, time.Hour) // the test commits
			f := &decodedFixture{
				t: t, s: s, sid: newSession(t, s, "alice", time.Now()).GetId(),
				dctx: metadata.NewIncomingContext(ctx, metadata.Pairs(boltstore.DeferHeader, "next-commit")),
			}
			tc.run(f)
			// What the cache holds is the last load's messages, no more.
			ds := s.decoded.take(f.sid)
			if len(ds.msgs) != len(f.last) {
				t.Errorf("cache holds %d messages of the session, the last load %d", len(ds.msgs), len(f.last))
			}
		})
	}
}

// TestDecodedCacheBound checks that the cache keeps at most its bytes, dropping the sessions
// loaded least recently, and never keeps a session larger than the whole cache.
func TestDecodedCacheBound(t *testing.T) {
	raw, err := proto.Marshal(&sessionv1.Message{Content: "0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	c := newDecodedCache(3 * entrySize(raw))
	fill := func(sid string, n int) {
		ds := c.take(sid)
		for i := range n {
			if _, err := ds.decode(int64(i+1), raw); err != nil {
				t.Fatal(err)
			}
		}
		c.keep(ds)
	}
	held := func() []string {
		var out []string
		for el := c.lru.Front(); el != nil; el = el.Next() {
			ds := el.Value.(*decodedSession)
			out = append(out, fmt.Sprintf("%s:%d", ds.sid, len(ds.msgs)))
		}
		return out
	}
	fill("a", 1)
	fill("b", 1)
	fill("c", 1)
	fill("a", 1) // a is the most recent again
	fill("d", 1) // b goes
	if diff := cmp.Diff([]string{"d:1", "a:1", "c:1"}, held()); diff != "" {
		t.Errorf("sessions held (-want +got):\n%s", diff)
	}
	fill("e", 4) // larger than the cache: not kept, nothing else goes
	if diff := cmp.Diff([]string{"d:1", "a:1", "c:1"}, held()); diff != "" {
		t.Errorf("after a session larger than the cache (-want +got):\n%s", diff)
	}
	if c.size != 3*entrySize(raw) {
		t.Errorf("size %d, want %d", c.size, 3*entrySize(raw))
	}
}
