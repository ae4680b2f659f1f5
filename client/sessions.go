package client

import (
	"context"
	"iter"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// pageSize is how many items a listing asks for per call; the server caps it.
const pageSize = 100

// CreateSession starts a session for the user with a title (which may be empty).
func (c *Client) CreateSession(ctx context.Context, title string) (*sessionv1.Session, error) {
	resp, err := c.Sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: c.user, Title: title})
	if err != nil {
		return nil, err
	}
	return resp.GetSession(), nil
}

// GetSession returns the session with its state (message and turn counts, last sequence number).
func (c *Client) GetSession(ctx context.Context, id string) (*sessionv1.Session, error) {
	resp, err := c.Sessions.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: id, UserId: c.user})
	if err != nil {
		return nil, err
	}
	return resp.GetSession(), nil
}

// ListSessions yields the user's sessions, fetching pages as the loop goes on.
func (c *Client) ListSessions(ctx context.Context) iter.Seq2[*sessionv1.Session, error] {
	return pages(func(token string) ([]*sessionv1.Session, string, error) {
		resp, err := c.Sessions.ListSessions(ctx, &sessionv1.ListSessionsRequest{UserId: c.user, PageSize: pageSize, PageToken: token})
		return resp.GetSessions(), resp.GetNextPageToken(), err
	})
}

// DeleteSession deletes the session and its messages.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	_, err := c.Sessions.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id, UserId: c.user})
	return err
}

// AppendMessages adds messages to the session (outside a turn: imported history, notes) and
// returns them as stored, with their sequence numbers. A message with a client_id already in
// the session is not stored twice, so a retried call is safe.
func (c *Client) AppendMessages(ctx context.Context, sessionID string, msgs ...*sessionv1.NewMessage) ([]*sessionv1.Message, error) {
	resp, err := c.Sessions.AppendMessages(ctx, &sessionv1.AppendMessagesRequest{SessionId: sessionID, UserId: c.user, Messages: msgs})
	if err != nil {
		return nil, err
	}
	return resp.GetMessages(), nil
}

// Messages yields the session's messages with a sequence number above afterSeq (0: all), in
// order, fetching pages as the loop goes on.
func (c *Client) Messages(ctx context.Context, sessionID string, afterSeq int64) iter.Seq2[*sessionv1.Message, error] {
	return pages(func(token string) ([]*sessionv1.Message, string, error) {
		resp, err := c.Sessions.ListMessages(ctx, &sessionv1.ListMessagesRequest{SessionId: sessionID, UserId: c.user, AfterSeq: afterSeq, PageSize: pageSize, PageToken: token})
		return resp.GetMessages(), resp.GetNextPageToken(), err
	})
}

// SearchMessages searches the user's messages for query, in one session or, with sessionID
// empty, in all of them; each hit comes with a message of context either side.
func (c *Client) SearchMessages(ctx context.Context, query, sessionID string) ([]*sessionv1.SearchHit, error) {
	resp, err := c.Sessions.SearchMessages(ctx, &sessionv1.SearchMessagesRequest{UserId: c.user, Query: query, SessionId: sessionID, Neighbors: 1})
	if err != nil {
		return nil, err
	}
	return resp.GetHits(), nil
}

// Context returns what the session service would give the model as history now: the summary,
// pinned messages and the window of recent turns, with their token counts. The session's own
// window and budget apply.
func (c *Client) Context(ctx context.Context, sessionID string) (*sessionv1.BuildContextResponse, error) {
	return c.Sessions.BuildContext(ctx, &sessionv1.BuildContextRequest{SessionId: sessionID, UserId: c.user})
}

// pages turns a paged listing into a sequence; an error ends it.
func pages[T any](page func(token string) ([]T, string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		token := ""
		for {
			items, next, err := page(token)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" || next == token {
				return
			}
			token = next
		}
	}
}
