package memory

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
	pfSubject  = "subject"
	pfAttrKeys = "attr_keys"
	pfContent  = "content"
	// pfLexDims lists the non-zero components of a sparse (lexical) vector, so DocFreq can
	// count them with a payload index.
	pfLexDims = "lex_dims"
	// pfSchema is the layout version, on the collection's meta point only.
	pfSchema = "hermes_memory_schema"
)

// qdrantSchema is the point layout this store writes: 2 added lex_dims. A collection whose
// meta point says less (or that has none) gets lex_dims backfilled when the store opens it.
const qdrantSchema = 2

// qdrantMetaID is the collection's meta point. It has no user_id, so no per-user filter — every
// read, count and delete of memories has one — ever matches it.
var qdrantMetaID = derivedID("hermes", "memory", "qdrant collection meta")

// QdrantSemantic is the semantic tier in Qdrant through the official go-client: one collection
// with cosine distance, a tenant payload index on user_id, and indexes on the filter fields.
type QdrantSemantic struct {
	c    *qdrant.Client
	coll string
	dim  int
}

var _ TierStore = (*QdrantSemantic)(nil)

// NewQdrantSemantic ensures the collection exists with the embedder's dimension and cosine
// distance; an existing collection of another dimension is a clear error, since mixing
// embedders would make every similarity meaningless.
func NewQdrantSemantic(ctx context.Context, c *qdrant.Client, collection string, dim int) (*QdrantSemantic, error) {
	s := &QdrantSemantic{c: c, coll: collection, dim: dim}
	exists, err := c.CollectionExists(ctx, collection)
	if err != nil {
		return nil, fmt.Errorf("qdrant: %w", err)
	}
	if !exists {
		err := c.CreateCollection(ctx, &qdrant.CreateCollection{
			CollectionName: collection,
			VectorsConfig:  qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: uint64(dim), Distance: qdrant.Distance_Cosine}),
		})
		if err != nil && status.Code(errors.Unwrap(err)) != codes.AlreadyExists && status.Code(err) != codes.AlreadyExists {
			return nil, fmt.Errorf("qdrant: create collection %s: %w", collection, err)
		}
	}
	info, err := c.GetCollectionInfo(ctx, collection)
	if err != nil {
		return nil, fmt.Errorf("qdrant: collection %s: %w", collection, err)
	}
	params := info.GetConfig().GetParams().GetVectorsConfig().GetParams()
	if params == nil {
		return nil, fmt.Errorf("qdrant: collection %s has no single unnamed vector; use another collection (--memory.qdrant-collection)", collection)
	}
	if int(params.GetSize()) != dim {
		return nil, fmt.Errorf("qdrant: collection %s holds vectors of size %d but the embedder produces %d: use another collection (--memory.qdrant-collection) or the embedder it was built with", collection, params.GetSize(), dim)
	}
	if params.GetDistance() != qdrant.Distance_Cosine {
		return nil, fmt.Errorf("qdrant: collection %s uses %s distance, want Cosine", collection, params.GetDistance())
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
		{pfSubject, qdrant.FieldType_FieldTypeKeyword, nil},
		{pfAttrKeys, qdrant.FieldType_FieldTypeKeyword, nil},
		{pfLexDims, qdrant.FieldType_FieldTypeInteger, nil},
	}
	for _, ix := range indexes {
		wait := true
		if _, err := c.CreateFieldIndex(ctx, &qdrant.CreateFieldIndexCollection{
			CollectionName: collection, FieldName: ix.field, FieldType: &ix.typ, FieldIndexParams: ix.p, Wait: &wait,
		}); err != nil {
			return nil, fmt.Errorf("qdrant: payload index %s: %w", ix.field, err)
		}
	}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// migrate brings a collection written by an earlier layout up to qdrantSchema: points with a
// sparse vector and no lex_dims get it (set on its own, so a concurrent write of the record is
// not overwritten), then the meta point records the schema. Replicas starting together may
// both run it; it is idempotent.
func (s *QdrantSemantic) migrate(ctx context.Context) error {
	pts, err := s.c.Get(ctx, &qdrant.GetPoints{CollectionName: s.coll, Ids: []*qdrant.PointId{qdrant.NewID(qdrantMetaID)}, WithPayload: qdrant.NewWithPayload(true)})
	if err != nil {
		return fmt.Errorf("qdrant: collection %s meta: %w", s.coll, err)
	}
	if len(pts) == 1 && pts[0].GetPayload()[pfSchema].GetIntegerValue() >= qdrantSchema {
		return nil
	}
	var offset *qdrant.PointId
	limit := uint32(256)
	for {
		page, next, err := s.c.ScrollAndOffset(ctx, &qdrant.ScrollPoints{
			CollectionName: s.coll, Offset: offset, Limit: &limit,
			WithPayload: qdrant.NewWithPayloadInclude(pfUser, pfLexDims), WithVectors: qdrant.NewWithVectors(true),
		})
		if err != nil {
			return fmt.Errorf("qdrant: collection %s migration: %w", s.coll, err)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(8)
		for _, p := range page {
			pl := p.GetPayload()
			if pl[pfUser] == nil || pl[pfLexDims] != nil {
				continue
			}
			dims := sparseDims(pointVector(p.GetVectors()))
			if dims == nil {
				continue
			}
			id := p.GetId()
			g.Go(func() error {
				wait := true
				_, err := s.c.SetPayload(gctx, &qdrant.SetPayloadPoints{
					CollectionName: s.coll, Wait: &wait,
					Payload:        map[string]*qdrant.Value{pfLexDims: lexDimsValue(dims)},
					PointsSelector: qdrant.NewPointsSelector(id),
				})
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return fmt.Errorf("qdrant: collection %s migration: %w", s.coll, err)
		}
		if next == nil {
			break
		}
		offset = next
	}
	meta := make([]float32, s.dim)
	meta[0] = 1 // cosine needs a non-zero vector; no query filters reach this point
	wait := true
	_, err = s.c.Upsert(ctx, &qdrant.UpsertPoints{CollectionName: s.coll, Wait: &wait, Points: []*qdrant.PointStruct{{
		Id: qdrant.NewID(qdrantMetaID), Vectors: qdrant.NewVectorsDense(meta),
		Payload: map[string]*qdrant.Value{pfSchema: qdrant.NewValueInt(qdrantSchema)},
	}}})
	if err != nil {
		return fmt.Errorf("qdrant: collection %s meta: %w", s.coll, err)
	}
	return nil
}

// sparseDims returns the non-zero components of a sparse vector (the lexical embedder's, under
// the index's density rule), or nil for a dense one.
func sparseDims(vec []float32) []int64 {
	nnz := 0
	for _, f := range vec {
		if f != 0 {
			nnz++
		}
	}
	if !storedSparse(nnz, len(vec)) {
		return nil
	}
	out := make([]int64, 0, nnz)
	for i, f := range vec {
		if f != 0 {
			out = append(out, int64(i))
		}
	}
	return out
}

func lexDimsValue(dims []int64) *qdrant.Value {
	vs := make([]*qdrant.Value, len(dims))
	for i, d := range dims {
		vs[i] = qdrant.NewValueInt(d)
	}
	return qdrant.NewValueFromList(vs...)
}

func (s *QdrantSemantic) payload(m *memoryv1.Memory, vec []float32) (map[string]*qdrant.Value, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode memory: %w", err)
	}
	keys := make([]*qdrant.Value, 0, len(m.GetAttributes()))
	for _, k := range attrKeys(m) {
		keys = append(keys, qdrant.NewValueString(k))
	}
	p := map[string]*qdrant.Value{
		pfRecord:   qdrant.NewValueString(base64.StdEncoding.EncodeToString(b)),
		pfUser:     qdrant.NewValueString(m.GetUserId()),
		pfType:     qdrant.NewValueString(typeName(m.GetType())),
		pfExpired:  qdrant.NewValueBool(!live(m)),
		pfUpdated:  qdrant.NewValueInt(m.GetUpdatedAt().AsTime().UnixMilli()),
		pfSubject:  qdrant.NewValueString(m.GetSubject()),
		pfAttrKeys: qdrant.NewValueFromList(keys...),
		pfContent:  qdrant.NewValueString(m.GetContent()),
	}
	if dims := sparseDims(vec); dims != nil {
		p[pfLexDims] = lexDimsValue(dims)
	}
	return p, nil
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

func pointVector(vec *qdrant.VectorsOutput) []float32 {
	v := vec.GetVector()
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
	p, err := s.payload(m, e.Vector)
	if err != nil {
		return err
	}
	wait := true
	_, err = s.c.Upsert(ctx, &qdrant.UpsertPoints{
		CollectionName: s.coll,
		Wait:           &wait,
		Points: []*qdrant.PointStruct{{
			Id: qdrant.NewID(m.GetId()), Vectors: qdrant.NewVectorsDense(e.Vector), Payload: p,
		}},
	})
	if err != nil {
		return fmt.Errorf("qdrant upsert: %w", err)
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
		return Entry{}, fmt.Errorf("qdrant get: %w", err)
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
	_, err := s.c.Delete(ctx, &qdrant.DeletePoints{
		CollectionName: s.coll, Wait: &wait,
		Points: qdrant.NewPointsSelectorFilter(userFilter(userID, qdrant.NewHasID(qdrant.NewID(id)))),
	})
	if err != nil {
		return false, fmt.Errorf("qdrant delete: %w", err)
	}
	return true, nil
}

// Search implements TierStore.
func (s *QdrantSemantic) Search(ctx context.Context, userID string, q SearchQuery) ([]Hit, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
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
	if len(q.AttributeKeys) > 0 {
		f.Must = append(f.Must, qdrant.NewMatchKeywords(pfAttrKeys, q.AttributeKeys...))
	}
	limit := uint64(q.Limit)
	req := &qdrant.QueryPoints{
		CollectionName: s.coll,
		Query:          qdrant.NewQueryDense(q.Vector),
		Filter:         f,
		Limit:          &limit,
		WithPayload:    qdrant.NewWithPayload(true),
		WithVectors:    qdrant.NewWithVectors(false),
	}
	if q.MinSimilarity > -1 {
		th := float32(q.MinSimilarity)
		req.ScoreThreshold = &th
	}
	pts, err := s.c.Query(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("qdrant query: %w", err)
	}
	out := make([]Hit, 0, len(pts))
	for _, p := range pts {
		e, err := pointEntry(p.GetId(), p.GetPayload(), p.GetVectors())
		if err != nil {
			return nil, err
		}
		// Qdrant scores in float32; compare the threshold on the same scale it applied.
		out = append(out, Hit{Entry: e, Similarity: float64(p.GetScore())})
	}
	return out, nil
}

// DocFreq implements TierStore with one count of the user's points and one per dimension, on
// the lex_dims payload index (eight at a time). Expired points count, as in the other tiers.
func (s *QdrantSemantic) DocFreq(ctx context.Context, userID string, dims []int) (int, []int, error) {
	df := make([]int, len(dims))
	var n uint64
	exact := true
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	g.Go(func() error {
		c, err := s.c.Count(gctx, &qdrant.CountPoints{CollectionName: s.coll, Filter: userFilter(userID), Exact: &exact})
		n = c
		return err
	})
	for i, k := range dims {
		g.Go(func() error {
			c, err := s.c.Count(gctx, &qdrant.CountPoints{CollectionName: s.coll,
				Filter: userFilter(userID, qdrant.NewMatchInt(pfLexDims, int64(k))), Exact: &exact})
			df[i] = int(c)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, nil, fmt.Errorf("qdrant count: %w", err)
	}
	return int(n), df, nil
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
			return fmt.Errorf("qdrant scroll: %w", err)
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
				return false, fmt.Errorf("qdrant set payload: %w", err)
			}
			return true, nil
		})
}

// DeleteUser implements TierStore.
func (s *QdrantSemantic) DeleteUser(ctx context.Context, userID string) (UserCounts, error) {
	exact := true
	liveN, err := s.c.Count(ctx, &qdrant.CountPoints{CollectionName: s.coll, Filter: userFilter(userID, qdrant.NewMatchBool(pfExpired, false)), Exact: &exact})
	if err != nil {
		return UserCounts{}, fmt.Errorf("qdrant count: %w", err)
	}
	all, err := s.c.Count(ctx, &qdrant.CountPoints{CollectionName: s.coll, Filter: userFilter(userID), Exact: &exact})
	if err != nil {
		return UserCounts{}, fmt.Errorf("qdrant count: %w", err)
	}
	wait := true
	if _, err := s.c.Delete(ctx, &qdrant.DeletePoints{CollectionName: s.coll, Wait: &wait, Points: qdrant.NewPointsSelectorFilter(userFilter(userID))}); err != nil {
		return UserCounts{}, fmt.Errorf("qdrant delete: %w", err)
	}
	return UserCounts{Live: int64(liveN), Expired: int64(all - liveN)}, nil
}

// CountUser counts the user's points (tests: ForgetUser must leave nothing).
func (s *QdrantSemantic) CountUser(ctx context.Context, userID string) (uint64, error) {
	exact := true
	return s.c.Count(ctx, &qdrant.CountPoints{CollectionName: s.coll, Filter: userFilter(userID), Exact: &exact})
}

// Ping checks that Qdrant answers (health watch).
func (s *QdrantSemantic) Ping(ctx context.Context) error {
	_, err := s.c.HealthCheck(ctx)
	return err
}

// DialQdrant returns a client of the Qdrant gRPC API at addr (host:port, port 6334 by default).
// The connection is lazy; the version check of the client is skipped because Hermes checks
// what it needs (the collection's dimension and distance) itself.
func DialQdrant(addr string) (*qdrant.Client, error) {
	host, port, err := parseHostPort(addr)
	if err != nil {
		return nil, err
	}
	c, err := qdrant.NewClient(&qdrant.Config{Host: host, Port: port, SkipCompatibilityCheck: true})
	if err != nil {
		return nil, fmt.Errorf("qdrant at %s: %w", addr, err)
	}
	return c, nil
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
