package memory

import (
	"context"
	"encoding/base64"
	"errors"
	"sort"
	"strconv"
	"strings"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// listParams are a validated ListMemories request.
type listParams struct {
	userID         string
	types          []memoryv1.MemoryType
	tier           memoryv1.Tier
	includeExpired bool
	pageSize       int
	after          *pageCursor
}

// pageCursor is the position after the last memory of a page: newest first, by creation time
// then id.
type pageCursor struct {
	createdMs int64
	id        string
}

func (c pageCursor) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.createdMs, 10) + "|" + c.id))
}

func parsePageToken(s string) (*pageCursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("not a page token of this service")
	}
	ms, id, ok := strings.Cut(string(b), "|")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || !validID(id) {
		return nil, errors.New("not a page token of this service")
	}
	return &pageCursor{createdMs: n, id: id}, nil
}

func (c pageCursor) before(o pageCursor) bool {
	if c.createdMs != o.createdMs {
		return c.createdMs > o.createdMs
	}
	return c.id > o.id
}

// list returns one page of the user's memories, newest first.
func (s *Service) list(ctx context.Context, p listParams) ([]*memoryv1.Memory, string, error) {
	var all []*memoryv1.Memory
	for _, t := range []memoryv1.Tier{memoryv1.Tier_TIER_EPISODIC, memoryv1.Tier_TIER_SEMANTIC} {
		if p.tier != memoryv1.Tier_TIER_UNSPECIFIED && p.tier != t {
			continue
		}
		err := s.tier(t).Scan(ctx, p.userID, func(e Entry) error {
			m := e.Memory
			if (!p.includeExpired && !live(m)) || !typeAllowed(p.types, m.GetType()) {
				return nil
			}
			m.Tier = t
			all = append(all, m)
			return nil
		})
		if err != nil {
			return nil, "", err
		}
	}
	cur := func(m *memoryv1.Memory) pageCursor {
		return pageCursor{m.GetCreatedAt().AsTime().UnixMilli(), m.GetId()}
	}
	sort.Slice(all, func(i, j int) bool { return cur(all[i]).before(cur(all[j])) })
	start := 0
	if p.after != nil {
		start = sort.Search(len(all), func(i int) bool { return p.after.before(cur(all[i])) })
	}
	end := min(start+p.pageSize, len(all))
	page := all[start:end]
	next := ""
	if end < len(all) && len(page) > 0 {
		next = cur(page[len(page)-1]).token()
	}
	return page, next, nil
}

// forget deletes one memory of the user from whichever tier holds it.
func (s *Service) forget(ctx context.Context, userID, id string) error {
	found := false
	for _, t := range []TierStore{s.ep, s.sem} {
		ok, err := t.Delete(ctx, userID, id)
		if err != nil {
			return err
		}
		found = found || ok
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// forgetUser deletes everything of the user in every store.
func (s *Service) forgetUser(ctx context.Context, userID string) (*memoryv1.ForgetUserResponse, error) {
	s.convs.forget(userID)
	ep, err := s.ep.DeleteUser(ctx, userID)
	if err != nil {
		return nil, err
	}
	sem, err := s.sem.DeleteUser(ctx, userID)
	if err != nil {
		return nil, err
	}
	counters, records, err := s.state.DeleteUser(ctx, userID)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "forgot user", "user", userID, "memories", ep.Live+sem.Live, "expired", ep.Expired+sem.Expired)
	return &memoryv1.ForgetUserResponse{
		Memories: ep.Live + sem.Live, Expired: ep.Expired + sem.Expired, Counters: counters,
		ExtractionRecords: records, Vectors: ep.Live + ep.Expired + sem.Live + sem.Expired,
	}, nil
}
