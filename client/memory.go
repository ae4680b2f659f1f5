package client

import (
	"context"
	"iter"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// Remember stores a fact about the user, as the user asked for it (source explicit). A memory
// that says the same as one already stored updates it; the answer says which. For every field
// (attributes, subject, tier …) call c.Memory.Remember.
func (c *Client) Remember(ctx context.Context, typ memoryv1.MemoryType, content string) (*memoryv1.RememberResponse, error) {
	return c.Memory.Remember(ctx, &memoryv1.RememberRequest{UserId: c.user, Type: typ, Content: content, Source: memoryv1.Source_SOURCE_EXPLICIT})
}

// Recall returns up to limit of the user's memories that match query, best first, with their
// scores and why each matched (limit 0: the server's default).
func (c *Client) Recall(ctx context.Context, query string, limit int) ([]*memoryv1.RecalledMemory, error) {
	resp, err := c.Memory.Recall(ctx, &memoryv1.RecallRequest{UserId: c.user, Query: query, Limit: int32(min(max(limit, 0), 1<<20))})
	if err != nil {
		return nil, err
	}
	return resp.GetMemories(), nil
}

// Memories yields the user's current memories, fetching pages as the loop goes on.
func (c *Client) Memories(ctx context.Context) iter.Seq2[*memoryv1.Memory, error] {
	return pages(func(token string) ([]*memoryv1.Memory, string, error) {
		resp, err := c.Memory.ListMemories(ctx, &memoryv1.ListMemoriesRequest{UserId: c.user, PageSize: pageSize, PageToken: token})
		return resp.GetMemories(), resp.GetNextPageToken(), err
	})
}

// Forget deletes one of the user's memories.
func (c *Client) Forget(ctx context.Context, memoryID string) error {
	_, err := c.Memory.Forget(ctx, &memoryv1.ForgetRequest{UserId: c.user, MemoryId: memoryID})
	return err
}
