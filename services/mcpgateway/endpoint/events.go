package endpoint

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// eventStore keeps the SSE events of the endpoint's streams in memory so a client whose stream
// broke can resume it with Last-Event-ID and lose nothing. It is bounded three ways: total
// bytes over all sessions (the oldest events anywhere go first), events per stream (the
// stream's oldest go first) and age. A client that resumes after its events were dropped is
// told so (mcp.ErrEventsPurged) rather than handed a stream with a gap.
type eventStore struct {
	maxBytes     int
	maxPerStream int
	maxAge       time.Duration
	now          func() time.Time

	mu      sync.Mutex                 // guards the fields below and the streams' events
	streams map[streamKey]*eventStream // guarded by mu
	// fifo holds every kept event in the order appended, for dropping the oldest first; an
	// entry whose event was already dropped (per-stream cap, closed session) is skipped when
	// it reaches the front. Guarded by mu.
	fifo  []fifoEntry
	bytes int // guarded by mu: data bytes of all kept events
}

type streamKey struct{ session, stream string }

// eventStream holds one stream's kept events; events[i] has index first+i. A stream whose
// events were all dropped is forgotten, so the map does not grow with a long session's
// requests; if it gets events again their indexes are unknown (lost), and it cannot be resumed.
type eventStream struct {
	first  int
	lost   bool
	events []keptEvent
}

type keptEvent struct {
	data []byte
	at   time.Time
}

type fifoEntry struct {
	key   streamKey
	index int
}

func newEventStore(maxBytes, maxPerStream int, maxAge time.Duration) *eventStore {
	return &eventStore{maxBytes: maxBytes, maxPerStream: maxPerStream, maxAge: maxAge, now: time.Now, streams: map[streamKey]*eventStream{}}
}

var _ mcp.EventStore = (*eventStore)(nil)

// Open implements mcp.EventStore.
func (s *eventStore) Open(_ context.Context, session, stream string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := streamKey{session, stream}
	if s.streams[k] == nil {
		s.streams[k] = &eventStream{}
	}
	return nil
}

// Append implements mcp.EventStore.
func (s *eventStore) Append(_ context.Context, session, stream string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := streamKey{session, stream}
	st := s.streams[k]
	if st == nil {
		st = &eventStream{lost: true}
		s.streams[k] = st
	}
	now := s.now()
	st.events = append(st.events, keptEvent{data: slices.Clone(data), at: now})
	s.fifo = append(s.fifo, fifoEntry{key: k, index: st.first + len(st.events) - 1})
	s.bytes += len(data)
	for len(st.events) > s.maxPerStream {
		s.dropFirst(st)
	}
	s.purge(now)
	return nil
}

// dropFirst drops a stream's oldest event. s.mu must be held.
func (s *eventStore) dropFirst(st *eventStream) {
	s.bytes -= len(st.events[0].data)
	st.events[0] = keptEvent{}
	st.events = st.events[1:]
	st.first++
}

// purge drops the oldest events until the store is within its byte limit and holds nothing
// older than maxAge. s.mu must be held.
func (s *eventStore) purge(now time.Time) {
	for len(s.fifo) > 0 {
		e := s.fifo[0]
		st := s.streams[e.key]
		if st == nil || e.index < st.first {
			s.fifo = s.fifo[1:] // dropped already
			continue
		}
		old := st.events[e.index-st.first]
		if s.bytes <= s.maxBytes && now.Sub(old.at) <= s.maxAge {
			break
		}
		// Events of a stream are appended in order, so the front entry is its first event.
		s.dropFirst(st)
		s.fifo = s.fifo[1:]
		if len(st.events) == 0 {
			delete(s.streams, e.key)
		}
	}
	if len(s.fifo) == 0 {
		s.fifo = nil // let the backing array go
	}
}

// After implements mcp.EventStore.
func (s *eventStore) After(_ context.Context, session, stream string, index int) iter.Seq2[[]byte, error] {
	s.mu.Lock()
	s.purge(s.now())
	var (
		out [][]byte
		err error
	)
	st := s.streams[streamKey{session, stream}]
	switch {
	case st == nil || st.lost:
		err = fmt.Errorf("stream %q of session %q is not known, or its events were dropped: %w", stream, session, mcp.ErrEventsPurged)
	case index+1 < st.first:
		err = fmt.Errorf("the events after %d of stream %q were dropped (kept: from %d): %w", index, stream, st.first, mcp.ErrEventsPurged)
	default:
		from := min(max(index+1-st.first, 0), len(st.events))
		for _, e := range st.events[from:] {
			out = append(out, e.data)
		}
	}
	s.mu.Unlock()
	return func(yield func([]byte, error) bool) {
		if err != nil {
			yield(nil, err)
			return
		}
		for _, d := range out {
			if !yield(d, nil) {
				return
			}
		}
	}
}

// SessionClosed implements mcp.EventStore.
func (s *eventStore) SessionClosed(_ context.Context, session string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, st := range s.streams {
		if k.session != session {
			continue
		}
		for _, e := range st.events {
			s.bytes -= len(e.data)
		}
		delete(s.streams, k)
	}
	return nil
}

// size reports the kept events and bytes, for tests.
func (s *eventStore) size() (events, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.streams {
		events += len(st.events)
	}
	return events, s.bytes
}
