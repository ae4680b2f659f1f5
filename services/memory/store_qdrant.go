package memory

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// Payload fields of a memory point. The record itself is stored whole (protobuf, base64) so a
// read returns exactly what was written; the other fields are what filters use, each with a
// payload index.
const (
	pfRecord   = "record"
	pfUser     = "user_id"
	pfType     = "type"
	pfExpired  = "expired"
	pfUpdated  = "updated_at_ms"
	pfOccurred = "occurred_at_ms"
	pfSubject  = "subject"
	pfAttrKeys = "attr_keys"
	pfContent  = "content"
)

// Named vectors of a point: the lexical one, always, and the dense one with a model embedder.
const (
	vecLexical = "lexical"
	vecDense   = "dense"
)

// QdrantSemantic is the semantic tier in Qdrant through the official go-client: one collection
// with a sparse vector "lexical" (BM25 term weights, lexDoc) with the IDF modifier, so Qdrant
// computes the IDF itself, over the whole collection, and with a model embedder a dense vector
// "dense" (cosine); a tenant payload index on user_id and indexes on the filter fields. Hybrid
// queries are one Query API request: a prefetch per vector, each with its threshold, fused by
// RRF.
type QdrantSemantic struct {
	c    *qdrant.Client
	coll string
	dim  int

	// countMu guards count, countAt (zero: none) and writes: the collection's point count that
	// Search last read (see pointCount), and how many writes this store made, so a count read
	// across a write is not kept.
	countMu sync.Mutex
	count   uint64
	countAt time.Time
	writes  uint64
	// countTTL is how long a count is reused: the constant countTTL, longer in a test.
	countTTL time.Duration
}

// countTTL is how long Search reuses the collection's point count, which only sets the lexical
// threshold's floor and is an estimate already (Qdrant counts with exact=false); this store's
// own writes forget it at once, other replicas' count within countTTL.
const countTTL = time.Second

// pointCount is the collection's point count, read at most every countTTL.
func (s *QdrantSemantic) pointCount(ctx context.Context) (uint64, error) {
	s.countMu.Lock()
	n, at, writes := s.count, s.countAt, s.writes
	s.countMu.Unlock()
	if !at.IsZero() && time.Since(at) < s.countTTL {
		return n, nil
	}
	at = time.Now()
	n, err := s.c.Count(ctx, &qdrant.CountPoints{CollectionName: s.coll, Exact: qdrant.PtrOf(false)})
	if err != nil {
		return 0, errclass.Mark(errclass.Unavailable, "qdrant count", err)
	}
	s.countMu.Lock()
	if s.writes == writes && at.After(s.countAt) {
		s.count, s.countAt = n, at
	}
	s.countMu.Unlock()
	return n, nil
}

// forgetCount makes the next Search count again; called after every write of this store.
func (s *QdrantSemantic) forgetCount() {
	s.countMu.Lock()
	s.writes++
	s.countAt = time.Time{}
	s.countMu.Unlock()
}

var _ TierStore = (*QdrantSemantic)(nil)

// NewQdrantSemantic ensures the collection exists with that layout (dim 0: no dense vector);
// an existing collection of another layout is a clear error, since mixing embedders would make
// every similarity meaningless.
func NewQdrantSemantic(ctx context.Context, c *qdrant.Client, collection string, dim int) (*QdrantSemantic, error) {
	s := &QdrantSemantic{c: c, coll: collection, dim: dim, countTTL: countTTL}
	exists, err := c.CollectionExists(ctx, collection)
	if err != nil {
		return nil, fmt.Errorf("qdrant: %w", err)
	}
	if !exists {
		idf := qdrant.Modifier_Idf
		create := &qdrant.CreateCollection{
			CollectionName:      collection,
			SparseVectorsConfig: qdrant.NewSparseVectorsConfig(map[string]*qdrant.SparseVectorParams{vecLexical: {Modifier: &idf}}),
		}
		if dim > 0 {
			create.VectorsConfig = qdrant.NewVectorsConfigMap(map[string]*qdrant.VectorParams{vecDense: {Size: uint64(dim), Distance: qdrant.Distance_Cosine}})
		}
		err := c.CreateCollection(ctx, create)
		if err != nil && status.Code(errors.Unwrap(err)) != codes.AlreadyExists && status.Code(err) != codes.AlreadyExists {
			return nil, fmt.Errorf("qdrant: create collection %s: %w", collection, err)
		}
	}
	info, err := c.GetCollectionInfo(ctx, collection)
	if err != nil {
		return nil, fmt.Errorf("qdrant: collection %s: %w", collection, err)
	}
	params := info.GetConfig().GetParams()
	lex := params.GetSparseVectorsConfig().GetMap()[vecLexical]
	if lex == nil || lex.GetModifier() != qdrant.Modifier_Idf {
		return nil, fmt.Errorf("qdrant: collection %s has no sparse vector %q with the IDF modifier (it was made by an earlier version of Hermes, with hashed lexical vectors): use a new collection (--memory.qdrant-collection)", collection, vecLexical)
	}
	dense := params.GetVectorsConfig().GetParamsMap().GetMap()[vecDense]
	switch {
	case dim == 0 && dense != nil:
		return nil, fmt.Errorf("qdrant: collection %s holds dense vectors of size %d but no embedding model is configured: use another collection (--memory.qdrant-collection) or the embedder it was built with", collection, dense.GetSize())
	case dim > 0 && dense == nil:
		return nil, fmt.Errorf("qdrant: collection %s has no dense vector but the embedder produces %d: use another collection (--memory.qdrant-collection)", collection, dim)
	case dim > 0 && int(dense.GetSize()) != dim:
		return nil, fmt.Errorf("qdrant: collection %s holds vectors of size %d but the embedder produces %d: use another collection (--memory.qdrant-collection) or the embedder it was built with", collection, dense.GetSize(), dim)
	case dim > 0 && dense.GetDistance() != qdrant.Distance_Cosine:
		return nil, fmt.Errorf("qdrant: collection %s uses %s distance, want Cosine", collection, dense.GetDistance())
	}
	tenant := true
	indexes := []struct {
		field string
		typ   qdrant.FieldType
		p     *qdrant.PayloadIndexParams
	}{
		{pfUser, qdrant.FieldType_FieldTypeKeyword, qdrant.NewPayloadIndexParamsKeyword(&qdrant.KeywordIndexParams{IsTenant: &tenant})},
		{pfType, qdrant.FieldType_FieldTypeKeyword, nil},
		{pfExpired, qdrant.FieldType_FieldTypeBool, nil},
		{pfUpdated, qdrant.FieldType_FieldTypeInteger, nil},
		{pfOccurred, qdrant.FieldType_FieldTypeInteger, nil},
		{pfSubject, qdrant.FieldType_FieldTypeKeyword, nil},
		{pfAttrKeys, qdrant.FieldType_FieldTypeKeyword, nil},
	}
	for _, ix := range indexes {
		wait := true
		if _, err := c.CreateFieldIndex(ctx, &qdrant.CreateFieldIndexCollection{
			CollectionName: collection, FieldName: ix.field, FieldType: &ix.typ, FieldIndexParams: ix.p, Wait: &wait,
		}); err != nil {
			return nil, fmt.Errorf("qdrant: payload index %s: %w", ix.field, err)
		}
	}
	return s, nil
}

func (s *QdrantSemantic) payload(m *memoryv1.Memory) (map[string]*qdrant.Value, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode memory: %w", err)
	}
	keys := make([]*qdrant.Value, 0, len(m.GetAttributes()))
	for _, k := range attrKeys(m) {
		keys = append(keys, qdrant.NewValueString(k))
	}
	return map[string]*qdrant.Value{
		pfRecord:   qdrant.NewValueString(base64.StdEncoding.EncodeToString(b)),
		pfUser:     qdrant.NewValueString(m.GetUserId()),
		pfType:     qdrant.NewValueString(typeName(m.GetType())),
		pfExpired:  qdrant.NewValueBool(!live(m)),
		pfUpdated:  qdrant.NewValueInt(m.GetUpdatedAt().AsTime().UnixMilli()),
		pfOccurred: qdrant.NewValueInt(occurredAt(m).UnixMilli()),
		pfSubject:  qdrant.NewValueString(m.GetSubject()),
		pfAttrKeys: qdrant.NewValueFromList(keys...),
		pfContent:  qdrant.NewValueString(m.GetContent()),
	}, nil
}

// vectors are a memory's named vectors as its point holds them.
func (s *QdrantSemantic) vectors(m *memoryv1.Memory, dense []float32) *qdrant.Vectors {
	lex := lexDoc(embedText(m))
	vs := map[string]*qdrant.Vector{vecLexical: qdrant.NewVectorSparse(lex.idx, lex.val)}
	if len(dense) > 0 {
		vs[vecDense] = qdrant.NewVectorDense(dense)
	}
	return qdrant.NewVectorsMap(vs)
}

func pointEntry(id *qdrant.PointId, payload map[string]*qdrant.Value, vec *qdrant.VectorsOutput) (Entry, error) {
	raw := payload[pfRecord].GetStringValue()
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return Entry{}, fmt.Errorf("qdrant point %s: bad record: %w", id.GetUuid(), err)
	}
	m := &memoryv1.Memory{}
	if err := proto.Unmarshal(b, m); err != nil {
		return Entry{}, fmt.Errorf("qdrant point %s: bad record: %w", id.GetUuid(), err)
	}
	return Entry{Memory: m, Vector: pointVector(vec)}, nil
}

// pointVector is a point's dense vector, if it has one.
func pointVector(vec *qdrant.VectorsOutput) []float32 {
	v := vec.GetVectors().GetVectors()[vecDense]
	if v == nil {
		return nil
	}
	if d := v.GetDense(); d != nil {
		return d.GetData()
	}
	return v.GetData() //nolint:staticcheck // older servers fill only data
}

func userFilter(userID string, extra ...*qdrant.Condition) *qdrant.Filter {
	return &qdrant.Filter{Must: append([]*qdrant.Condition{qdrant.NewMatchKeyword(pfUser, userID)}, extra...)}
}

// Put implements TierStore.
func (s *QdrantSemantic) Put(ctx context.Context, e Entry) error {
	if len(e.Vector) != s.dim {
		return fmt.Errorf("memory store: vector of size %d, want %d", len(e.Vector), s.dim)
	}
	m := cloneMemory(e.Memory)
	m.ExpiresAt = nil
	p, err := s.payload(m)
	if err != nil {
		return err
	}
	wait := true
	defer s.forgetCount()
	_, err = s.c.Upsert(ctx, &qdrant.UpsertPoints{
		CollectionName: s.coll,
		Wait:           &wait,
		Points: []*qdrant.PointStruct{{
			Id: qdrant.NewID(m.GetId()), Vectors: s.vectors(m, e.Vector), Payload: p,
		}},
	})
	if err != nil {
		return errclass.Mark(errclass.Unavailable, "qdrant upsert", err)
	}
	return nil
}

// Get implements TierStore.
func (s *QdrantSemantic) Get(ctx context.Context, userID, id string) (Entry, error) {
	pts, err := s.c.Get(ctx, &qdrant.GetPoints{
		CollectionName: s.coll, Ids: []*qdrant.PointId{qdrant.NewID(id)},
		WithPayload: qdrant.NewWithPayload(true), WithVectors: qdrant.NewWithVectors(true),
	})
	if err != nil {
		return Entry{}, errclass.Mark(errclass.Unavailable, "qdrant get", err)
	}
	for _, p := range pts {
		if u := p.GetPayload()[pfUser]; u == nil || u.GetStringValue() != userID {
			continue // another user's point (or the meta point) is not found, whatever its id
		}
		return pointEntry(p.GetId(), p.GetPayload(), p.GetVectors())
	}
	return Entry{}, ErrNotFound
}

// Delete implements TierStore. The delete is filtered by user as well as id, so an id of
// another user's memory deletes nothing.
func (s *QdrantSemantic) Delete(ctx context.Context, userID, id string) (bool, error) {
	if _, err := s.Get(ctx, userID, id); errors.Is(err, ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	wait := true
	defer s.forgetCount()
	_, err := s.c.Delete(ctx, &qdrant.DeletePoints{
		CollectionName: s.coll, Wait: &wait,
		Points: qdrant.NewPointsSelectorFilter(userFilter(userID, qdrant.NewHasID(qdrant.NewID(id)))),
	})
	if err != nil {
		return false, errclass.Mark(errclass.Unavailable, "qdrant delete", err)
	}
	return true, nil
}

// Search implements TierStore: one Query API request. The lexical query is sent with its
// weights and Qdrant applies the IDF (over the collection); with a dense vector too, each is a
// prefetch with its own threshold and limit, fused by RRF with k = rrfK.
func (s *QdrantSemantic) Search(ctx context.Context, userID string, q SearchQuery) ([]Hit, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
	f := s.searchFilter(userID, q)
	limit := uint64(q.Limit)
	type sub struct {
		query *qdrant.Query
		using *string
		th    *float32
	}
	// The lexical threshold's floor depends on how many points Qdrant's IDF is over.
	floorOf := func(ctx context.Context) (float64, error) {
		if q.MinLexical <= 0 || q.Lexical.empty() {
			return q.MinLexical, nil
		}
		n, err := s.pointCount(ctx)
		if err != nil {
			return 0, err
		}
		return lexicalFloor(q.MinLexical, int(n)), nil
	}
	// A context search applies the floor itself (Hit.Floor), so Qdrant counts while it queries
	// (below); otherwise the floor is the query's threshold.
	var floor, minLex float64
	if !q.ContextPool {
		var err error
		if minLex, err = floorOf(ctx); err != nil {
			return nil, err
		}
	}
	lexTh := float32(max(minLex, 1e-9))
	lex := sub{qdrant.NewQuerySparse(q.Lexical.idx, q.Lexical.val), qdrant.PtrOf(vecLexical), &lexTh}
	dense := sub{qdrant.NewQueryDense(q.Vector), qdrant.PtrOf(vecDense), nil}
	if q.MinSimilarity > -1 {
		th := float32(q.MinSimilarity)
		dense.th = &th
	}
	req := &qdrant.QueryPoints{CollectionName: s.coll, Filter: f, Limit: &limit, WithPayload: qdrant.NewWithPayload(true)}
	useLex, useDense := !q.Lexical.empty(), len(q.Vector) > 0 && s.dim > 0
	switch {
	case useLex && useDense:
		for _, p := range []sub{lex, dense} {
			req.Prefetch = append(req.Prefetch, &qdrant.PrefetchQuery{Query: p.query, Using: p.using, ScoreThreshold: p.th, Filter: f, Limit: &limit})
		}
		k := uint32(rrfK)
		req.Query = qdrant.NewQueryRRF(&qdrant.Rrf{K: &k})
	case useLex:
		req.Query, req.Using, req.ScoreThreshold = lex.query, lex.using, lex.th
	case useDense:
		req.Query, req.Using, req.ScoreThreshold = dense.query, dense.using, dense.th
	default:
		return nil, nil
	}
	g, gctx := errgroup.WithContext(ctx)
	if q.ContextPool {
		g.Go(func() (err error) {
			floor, err = floorOf(gctx)
			return err
		})
	}
	pts, err := s.c.Query(gctx, req)
	if gerr := g.Wait(); err == nil && gerr != nil {
		return nil, gerr
	}
	if err != nil {
		return nil, errclass.Mark(errclass.Unavailable, "qdrant query", err)
	}
	out := make([]Hit, 0, len(pts))
	seen := map[string]bool{}
	for _, p := range pts {
		e, err := pointEntry(p.GetId(), p.GetPayload(), nil)
		if err != nil {
			return nil, err
		}
		seen[e.Memory.GetId()] = true
		// Qdrant scores in float32; compare the threshold on the same scale it applied.
		out = append(out, Hit{Entry: e, Similarity: float64(p.GetScore()), Floor: floor})
	}
	// An attribute lookup ranks every memory carrying the key; a sparse query reaches only
	// those sharing a term, so the others follow with score 0.
	if len(q.AttributeKeys) > 0 && q.MinLexical <= 0 && len(out) < q.Limit {
		err := s.scroll(ctx, f, false, func(e Entry) error {
			if !seen[e.Memory.GetId()] && len(out) < q.Limit {
				out = append(out, Hit{Entry: e})
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// searchFilter is a Search's filters as Qdrant conditions.
func (s *QdrantSemantic) searchFilter(userID string, q SearchQuery) *qdrant.Filter {
	f := userFilter(userID, qdrant.NewMatchBool(pfExpired, false))
	if len(q.Types) > 0 {
		names := make([]string, len(q.Types))
		for i, t := range q.Types {
			names[i] = typeName(t)
		}
		f.Must = append(f.Must, qdrant.NewMatchKeywords(pfType, names...))
	}
	if !q.UpdatedAfter.IsZero() {
		gte := float64(q.UpdatedAfter.UnixMilli())
		f.Must = append(f.Must, qdrant.NewFilterAsCondition(&qdrant.Filter{Should: []*qdrant.Condition{
			qdrant.NewMatchKeyword(pfType, typeName(memoryv1.MemoryType_MEMORY_TYPE_FACT)),
			qdrant.NewRange(pfUpdated, &qdrant.Range{Gte: &gte}),
		}}))
	}
	if !q.OccurredAfter.IsZero() || !q.OccurredBefore.IsZero() {
		r := &qdrant.Range{}
		if !q.OccurredAfter.IsZero() {
			v := float64(q.OccurredAfter.UnixMilli())
			r.Gte = &v
		}
		if !q.OccurredBefore.IsZero() {
			v := float64(q.OccurredBefore.UnixMilli())
			r.Lt = &v
		}
		f.Must = append(f.Must, qdrant.NewRange(pfOccurred, r))
	}
	if len(q.AttributeKeys) > 0 {
		f.Must = append(f.Must, qdrant.NewMatchKeywords(pfAttrKeys, q.AttributeKeys...))
	}
	return f
}

// scroll calls fn for every point matching f.
func (s *QdrantSemantic) scroll(ctx context.Context, f *qdrant.Filter, withVectors bool, fn func(Entry) error) error {
	var offset *qdrant.PointId
	limit := uint32(256)
	for {
		pts, next, err := s.c.ScrollAndOffset(ctx, &qdrant.ScrollPoints{
			CollectionName: s.coll, Filter: f, Offset: offset, Limit: &limit,
			WithPayload: qdrant.NewWithPayload(true), WithVectors: qdrant.NewWithVectors(withVectors),
		})
		if err != nil {
			return errclass.Mark(errclass.Unavailable, "qdrant scroll", err)
		}
		for _, p := range pts {
			e, err := pointEntry(p.GetId(), p.GetPayload(), p.GetVectors())
			if err != nil {
				return err
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		offset = next
	}
}

// Scan implements TierStore.
func (s *QdrantSemantic) Scan(ctx context.Context, userID string, fn func(Entry) error) error {
	var all []Entry
	if err := s.scroll(ctx, userFilter(userID), true, func(e Entry) error { all = append(all, e); return nil }); err != nil {
		return err
	}
	for _, e := range all {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// BySubject implements TierStore.
func (s *QdrantSemantic) BySubject(ctx context.Context, userID, subject string) ([]Entry, error) {
	if subject == "" {
		return nil, nil
	}
	var out []Entry
	err := s.scroll(ctx, userFilter(userID, qdrant.NewMatchKeyword(pfSubject, subject), qdrant.NewMatchBool(pfExpired, false)), true,
		func(e Entry) error { out = append(out, e); return nil })
	return out, err
}

// Touch implements TierStore. The payload is set through a filter on id and user, so a point
// deleted meanwhile is not recreated.
func (s *QdrantSemantic) Touch(ctx context.Context, userID string, ids []string, at time.Time) ([]string, error) {
	return touchEach(ids, at,
		func(id string) (Entry, error) { return s.Get(ctx, userID, id) },
		func(id string, e Entry) (bool, error) {
			b, err := proto.Marshal(e.Memory)
			if err != nil {
				return false, err
			}
			wait := true
			_, err = s.c.SetPayload(ctx, &qdrant.SetPayloadPoints{
				CollectionName: s.coll, Wait: &wait,
				Payload:        map[string]*qdrant.Value{pfRecord: qdrant.NewValueString(base64.StdEncoding.EncodeToString(b))},
				PointsSelector: qdrant.NewPointsSelectorFilter(userFilter(userID, qdrant.NewHasID(qdrant.NewID(id)))),
			})
			if err != nil {
				return false, errclass.Mark(errclass.Unavailable, "qdrant set payload", err)
			}
			return true, nil
		})
}

// DeleteUser implements TierStore.
func (s *QdrantSemantic) DeleteUser(ctx context.Context, userID string) (UserCounts, error) {
	exact := true
	liveN, err := s.c.Count(ctx, &qdrant.CountPoints{CollectionName: s.coll, Filter: userFilter(userID, qdrant.NewMatchBool(pfExpired, false)), Exact: &exact})
	if err != nil {
		return UserCounts{}, errclass.Mark(errclass.Unavailable, "qdrant count", err)
	}
	all, err := s.c.Count(ctx, &qdrant.CountPoints{CollectionName: s.coll, Filter: userFilter(userID), Exact: &exact})
	if err != nil {
		return UserCounts{}, errclass.Mark(errclass.Unavailable, "qdrant count", err)
	}
	wait := true
	defer s.forgetCount()
	if _, err := s.c.Delete(ctx, &qdrant.DeletePoints{CollectionName: s.coll, Wait: &wait, Points: qdrant.NewPointsSelectorFilter(userFilter(userID))}); err != nil {
		return UserCounts{}, errclass.Mark(errclass.Unavailable, "qdrant delete", err)
	}
	return UserCounts{Live: int64(liveN), Expired: int64(all - liveN)}, nil
}

// Ping checks that Qdrant answers (health watch).
func (s *QdrantSemantic) Ping(ctx context.Context) error {
	_, err := s.c.HealthCheck(ctx)
	return err
}

// DialQdrant returns a client of the Qdrant gRPC API at addr (host:port, port 6334 by default).
// The connection is lazy; the version check of the client is skipped because Hermes checks
// what it needs (the collection's dimension and distance) itself.
func DialQdrant(addr string, opts QdrantDialOptions) (*qdrant.Client, error) {
	host, port, err := parseHostPort(addr)
	if err != nil {
		return nil, err
	}
	c, err := qdrant.NewClient(&qdrant.Config{Host: host, Port: port, APIKey: opts.APIKey, UseTLS: opts.TLS, SkipCompatibilityCheck: true, GrpcOptions: rpc.StaticWindows()})
	if err != nil {
		return nil, fmt.Errorf("qdrant at %s: %w", addr, err)
	}
	return c, nil
}

// QdrantDialOptions are how Hermes authenticates to Qdrant: its API key (Qdrant's
// service.api_key), over TLS when Qdrant serves it.
type QdrantDialOptions struct {
	APIKey string
	TLS    bool
}

func parseHostPort(addr string) (string, int, error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 6334, nil //nolint:nilerr // a bare host means the default gRPC port
	}
	port, err := strconv.Atoi(portS)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("qdrant address %q: bad port", addr)
	}
	return host, port, nil
}
