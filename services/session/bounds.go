package session

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// Byte bounds of responses, so that a session of large messages (each append within its
// limits) never produces a response beyond gRPC's message size: a page or a context is cut by
// size, not only by count, and says how to go on.
const (
	// maxPageBytes bounds the content of a ListMessages page.
	maxPageBytes = 4 << 20
	// defaultMessageBytes and maxMessageBytesLimit are BuildContext's max_message_bytes.
	defaultMessageBytes  = 64 << 10
	maxMessageBytesLimit = 1 << 20
	// maxEvictedBytes bounds the content of BuildContext's evicted messages.
	maxEvictedBytes = 1 << 20
	// maxWindowBytes bounds the content of the window and pinned messages together; when they
	// exceed it, every message is cut to an equal share (at least minMessageBytes).
	maxWindowBytes  = 8 << 20
	minMessageBytes = 4 << 10
)

// pageBySize keeps the longest prefix of msgs whose content fits maxPageBytes, at least one.
func pageBySize(msgs []*sessionv1.Message) ([]*sessionv1.Message, bool) {
	total := 0
	for i, m := range msgs {
		total += len(m.GetContent())
		if total > maxPageBytes && i > 0 {
			return msgs[:i], true
		}
	}
	return msgs, false
}

// clipContent cuts text to at most n bytes (on a character boundary), ending with a note of
// what was cut; text within n is returned as it is.
func clipContent(text string, n int, seq int64) (string, bool) {
	if len(text) <= n {
		return text, false
	}
	// The note with the most bytes cut is at least as long as the final one.
	note := fmt.Sprintf("\n[… %d of %d bytes cut here; the whole message is #%d of the session log]", len(text), len(text), seq)
	keep := max(n-len(note), 0)
	for keep > 0 && !utf8.RuneStart(text[keep]) {
		keep--
	}
	note = fmt.Sprintf("\n[… %d of %d bytes cut here; the whole message is #%d of the session log]", len(text)-keep, len(text), seq)
	return text[:keep] + note, true
}

// clipMessages returns msgs with every content longer than n cut (a cut message is a copy, its
// token count recounted by count), and how many were cut.
func clipMessages(msgs []*sessionv1.Message, n int, count func(toolName, content string) int32) ([]*sessionv1.Message, int) {
	cut := 0
	for i, m := range msgs {
		text, clipped := clipContent(m.GetContent(), n, m.GetSeq())
		if !clipped {
			continue
		}
		c := proto.CloneOf(m)
		c.Content = text
		c.TokenCount = count(c.GetToolName(), text)
		msgs[i] = c
		cut++
	}
	return msgs, cut
}

// contentBytes sums the content of msgs.
func contentBytes(msgs ...[]*sessionv1.Message) int {
	n := 0
	for _, ms := range msgs {
		for _, m := range ms {
			n += len(m.GetContent())
		}
	}
	return n
}

// boundEvicted keeps the oldest evicted messages whose content fits maxEvictedBytes (at least
// one), and reports whether any were left out.
func boundEvicted(msgs []*sessionv1.Message) ([]*sessionv1.Message, bool) {
	total := 0
	for i, m := range msgs {
		total += len(m.GetContent())
		if total > maxEvictedBytes && i > 0 {
			return msgs[:i], true
		}
	}
	return msgs, false
}
