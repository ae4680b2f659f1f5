package session

import (
	"bytes"
	"container/list"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// decodedCache keeps the messages decoded by the latest context load of recent sessions, so
// that a turn's load decodes only what is new since the session's previous load: re-decoding
// the whole window every turn was an eighth of a long session's allocations (issue 25).
//
// An entry is used only when the stored bytes are exactly those it was decoded from. That is
// what keeps it right whatever changed the file since (a deferred write rolled back and applied
// again, a message rewritten, a session deleted and created again under its id), so no write
// has to invalidate it. The messages it hands out are shared by the loads that find them: their
// readers must not change them (a built context is read only, and its messages that are cut are
// copies, clipMessages).
//
// A load takes the session's entries out (take) and puts them back (keep), keeping only those
// it used; two loads of one session at once each work alone. The cache holds at most max bytes,
// each entry counted as twice its encoding, dropping the sessions least recently loaded first.
type decodedCache struct {
	max int

	mu       sync.Mutex
	size     int
	sessions map[string]*list.Element // of *decodedSession
	lru      list.List                // most recently kept first
}

// decodedSession is one session's entries, owned by one load between take and keep.
type decodedSession struct {
	sid  string
	msgs map[int64]decodedMsg
	size int
	// gen counts the loads; an entry not used by the current one is dropped by keep.
	gen uint64
}

type decodedMsg struct {
	raw []byte // the encoding m was decoded from (a copy: bbolt's bytes live only in their tx)
	m   *sessionv1.Message
	gen uint64
}

// defaultDecodedBytes bounds the cache: about a thousand windows of 40 one-KB messages.
const defaultDecodedBytes = 32 << 20

// decodedOverhead is what an entry costs beyond its bytes (map slot, message header).
const decodedOverhead = 256

func newDecodedCache(max int) *decodedCache {
	return &decodedCache{max: max, sessions: map[string]*list.Element{}}
}

// take removes the entries of sid from the cache for one load, or starts them empty.
func (c *decodedCache) take(sid string) *decodedSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.sessions[sid]
	if !ok {
		return &decodedSession{sid: sid, msgs: map[int64]decodedMsg{}, gen: 1}
	}
	ds := c.lru.Remove(el).(*decodedSession)
	delete(c.sessions, sid)
	c.size -= ds.size
	ds.gen++
	return ds
}

// keep puts back the entries of a load that succeeded, without those it did not use.
func (c *decodedCache) keep(ds *decodedSession) {
	for seq, e := range ds.msgs {
		if e.gen != ds.gen {
			ds.size -= entrySize(e.raw)
			delete(ds.msgs, seq)
		}
	}
	if ds.size > c.max || len(ds.msgs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.sessions[ds.sid]; ok {
		// Another load of the session kept its entries meanwhile: this one's replace them.
		c.size -= c.lru.Remove(el).(*decodedSession).size
	}
	c.sessions[ds.sid] = c.lru.PushFront(ds)
	c.size += ds.size
	for c.size > c.max {
		old := c.lru.Remove(c.lru.Back()).(*decodedSession)
		delete(c.sessions, old.sid)
		c.size -= old.size
	}
}

// decode returns the message stored as raw under seq: the entry's when it was decoded from
// the same bytes, else a new one (never kept when ds is nil). raw may be bbolt's: it is copied
// when kept.
func (ds *decodedSession) decode(seq int64, raw []byte) (*sessionv1.Message, error) {
	if ds == nil {
		m := &sessionv1.Message{}
		if err := proto.Unmarshal(raw, m); err != nil {
			return nil, fmt.Errorf("decode message %d: %w", seq, err)
		}
		return m, nil
	}
	if e, ok := ds.msgs[seq]; ok {
		if bytes.Equal(e.raw, raw) {
			e.gen = ds.gen
			ds.msgs[seq] = e
			return e.m, nil
		}
		ds.size -= entrySize(e.raw)
		delete(ds.msgs, seq)
	}
	m := &sessionv1.Message{}
	if err := proto.Unmarshal(raw, m); err != nil {
		return nil, fmt.Errorf("decode message %d: %w", seq, err)
	}
	ds.msgs[seq] = decodedMsg{raw: bytes.Clone(raw), m: m, gen: ds.gen}
	ds.size += entrySize(raw)
	return m, nil
}

func entrySize(raw []byte) int { return 2*len(raw) + decodedOverhead }
