package memory

import (
	"sync"
	"time"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// maxConversationLinks bounds the conversations a replica remembers the last memory of; past it
// the map starts afresh (a conversation then loses one link).
const maxConversationLinks = 100_000

// conversationLinks remembers, per user and session, the last memory this replica wrote, so
// the next one of the conversation can name it (Memory.follows_id) and recall's conversation
// context borrows from exactly the turn before (contextBoost). A caller that knows the order
// better sets follows_id itself.
type conversationLinks struct {
	mu   sync.Mutex // guards last
	last map[conversationKey]conversationLast
}

type conversationKey struct{ user, session string }

type conversationLast struct {
	id       string
	occurred time.Time
}

func newConversationLinks() *conversationLinks {
	return &conversationLinks{last: map[conversationKey]conversationLast{}}
}

// previous is the id m follows: the last memory of its conversation, when m happened at most
// conversationGap after it (and not before it); "" otherwise.
func (c *conversationLinks) previous(m *memoryv1.Memory) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.last[conversationKey{m.GetUserId(), m.GetSessionId()}]
	if !ok {
		return ""
	}
	d := occurredAt(m).Sub(l.occurred)
	if d < 0 || d > conversationGap {
		return ""
	}
	return l.id
}

// record makes m the last memory of its conversation.
func (c *conversationLinks) record(m *memoryv1.Memory) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.last) >= maxConversationLinks {
		clear(c.last)
	}
	c.last[conversationKey{m.GetUserId(), m.GetSessionId()}] = conversationLast{m.GetId(), occurredAt(m)}
}

// forget drops a user's conversations (ForgetUser).
func (c *conversationLinks) forget(userID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.last {
		if k.user == userID {
			delete(c.last, k)
		}
	}
}
