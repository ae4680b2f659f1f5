// Package qdranttest is a test double of Qdrant — it is NOT Qdrant. It is an in-process gRPC
// server implementing the part of Qdrant's Collections, Points and Qdrant services (the
// go-client's generated interfaces) that Hermes' memory store uses: collections with one dense
// vector and cosine distance, upsert, get, delete by ids or filter, set payload, scroll, count,
// and nearest-neighbour query by exact search with a score threshold, filtered by must / should
// / must_not conditions on keyword, bool and integer payload fields and point ids. Anything
// else answers UNIMPLEMENTED, so a store that starts relying on more fails loudly in tests.
//
// Use it only from tests. Tests use a real Qdrant instead when HERMES_TEST_QDRANT_ADDR is set
// (see Addr).
package qdranttest

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// EnvAddr names the variable with a real Qdrant's gRPC address (host:6334).
const EnvAddr = "HERMES_TEST_QDRANT_ADDR"

// Addr returns the address tests should use: a real Qdrant when HERMES_TEST_QDRANT_ADDR is set,
// otherwise a double started for the test and stopped at its end.
func Addr(t testing.TB) string {
	t.Helper()
	if a := os.Getenv(EnvAddr); a != "" {
		return a
	}
	d, err := Start()
	if err != nil {
		t.Fatalf("qdrant double: %v", err)
	}
	t.Cleanup(d.Close)
	return d.Addr()
}

// Double is a running Qdrant test double.
type Double struct {
	srv *grpc.Server
	lis net.Listener

	mu    sync.Mutex
	colls map[string]*collection
}

type collection struct {
	dim     uint64
	dist    qdrant.Distance
	points  map[string]*point // by uuid
	order   []string          // insertion order, for stable scrolls
	indexes map[string]qdrant.FieldType
}

type point struct {
	id      *qdrant.PointId
	vec     []float32
	payload map[string]*qdrant.Value
}

// Start runs a double on a random loopback port.
func Start() (*Double, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	// The go-client pings every 10 s; allow it, as Qdrant does.
	srv := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}))
	d := &Double{srv: srv, lis: lis, colls: map[string]*collection{}}
	qdrant.RegisterCollectionsServer(d.srv, &collections{d: d})
	qdrant.RegisterPointsServer(d.srv, &points{d: d})
	qdrant.RegisterQdrantServer(d.srv, &health{})
	go func() { _ = d.srv.Serve(lis) }()
	return d, nil
}

// Addr is host:port of the double.
func (d *Double) Addr() string { return d.lis.Addr().String() }

// Close stops the double.
func (d *Double) Close() { d.srv.Stop() }

func (d *Double) coll(name string) (*collection, error) {
	c := d.colls[name]
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "Not found: Collection `%s` doesn't exist!", name)
	}
	return c, nil
}

type health struct {
	qdrant.UnimplementedQdrantServer
}

func (health) HealthCheck(context.Context, *qdrant.HealthCheckRequest) (*qdrant.HealthCheckReply, error) {
	return &qdrant.HealthCheckReply{Title: "qdranttest double (not Qdrant)", Version: "1.17.0"}, nil
}

type collections struct {
	qdrant.UnimplementedCollectionsServer
	d *Double
}

func (s *collections) CollectionExists(_ context.Context, r *qdrant.CollectionExistsRequest) (*qdrant.CollectionExistsResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	_, ok := s.d.colls[r.GetCollectionName()]
	return &qdrant.CollectionExistsResponse{Result: &qdrant.CollectionExists{Exists: ok}}, nil
}

func (s *collections) Create(_ context.Context, r *qdrant.CreateCollection) (*qdrant.CollectionOperationResponse, error) {
	p := r.GetVectorsConfig().GetParams()
	if p == nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest: only a single unnamed dense vector is supported")
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if _, ok := s.d.colls[r.GetCollectionName()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "Wrong input: Collection `%s` already exists!", r.GetCollectionName())
	}
	s.d.colls[r.GetCollectionName()] = &collection{dim: p.GetSize(), dist: p.GetDistance(), points: map[string]*point{}, indexes: map[string]qdrant.FieldType{}}
	return &qdrant.CollectionOperationResponse{Result: true}, nil
}

func (s *collections) Get(_ context.Context, r *qdrant.GetCollectionInfoRequest) (*qdrant.GetCollectionInfoResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	n := uint64(len(c.points))
	schema := map[string]*qdrant.PayloadSchemaInfo{}
	for f, t := range c.indexes {
		schema[f] = &qdrant.PayloadSchemaInfo{DataType: qdrant.PayloadSchemaType(t + 1)}
	}
	return &qdrant.GetCollectionInfoResponse{Result: &qdrant.CollectionInfo{
		Status:        qdrant.CollectionStatus_Green,
		PointsCount:   &n,
		PayloadSchema: schema,
		Config: &qdrant.CollectionConfig{Params: &qdrant.CollectionParams{
			VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: c.dim, Distance: c.dist}),
		}},
	}}, nil
}

func (s *collections) Delete(_ context.Context, r *qdrant.DeleteCollection) (*qdrant.CollectionOperationResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	_, ok := s.d.colls[r.GetCollectionName()]
	delete(s.d.colls, r.GetCollectionName())
	return &qdrant.CollectionOperationResponse{Result: ok}, nil
}

type points struct {
	qdrant.UnimplementedPointsServer
	d *Double
}

func done() *qdrant.PointsOperationResponse {
	return &qdrant.PointsOperationResponse{Result: &qdrant.UpdateResult{Status: qdrant.UpdateStatus_Completed}}
}

func key(id *qdrant.PointId) (string, error) {
	if u := id.GetUuid(); u != "" {
		return u, nil
	}
	if _, ok := id.GetPointIdOptions().(*qdrant.PointId_Num); ok {
		return fmt.Sprintf("#%d", id.GetNum()), nil
	}
	return "", status.Error(codes.InvalidArgument, "qdranttest: point id is required")
}

func (s *points) CreateFieldIndex(_ context.Context, r *qdrant.CreateFieldIndexCollection) (*qdrant.PointsOperationResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	c.indexes[r.GetFieldName()] = r.GetFieldType()
	return done(), nil
}

func (s *points) Upsert(_ context.Context, r *qdrant.UpsertPoints) (*qdrant.PointsOperationResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	for _, p := range r.GetPoints() {
		k, err := key(p.GetId())
		if err != nil {
			return nil, err
		}
		v := p.GetVectors().GetVector()
		var data []float32
		if d := v.GetDense(); d != nil {
			data = d.GetData()
		} else {
			data = v.GetData() //nolint:staticcheck // the deprecated form is still sent
		}
		if uint64(len(data)) != c.dim {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", c.dim, len(data))
		}
		if _, ok := c.points[k]; !ok {
			c.order = append(c.order, k)
		}
		c.points[k] = &point{id: p.GetId(), vec: slices.Clone(data), payload: clonePayload(p.GetPayload())}
	}
	return done(), nil
}

func clonePayload(p map[string]*qdrant.Value) map[string]*qdrant.Value {
	out := make(map[string]*qdrant.Value, len(p))
	for k, v := range p {
		out[k] = proto.Clone(v).(*qdrant.Value)
	}
	return out
}

// selected returns the keys a points selector picks.
func (c *collection) selected(sel *qdrant.PointsSelector) ([]string, error) {
	if f := sel.GetFilter(); f != nil {
		var out []string
		for _, k := range c.order {
			if p, ok := c.points[k]; ok && matches(p, f) {
				out = append(out, k)
			}
		}
		return out, nil
	}
	var out []string
	for _, id := range sel.GetPoints().GetIds() {
		k, err := key(id)
		if err != nil {
			return nil, err
		}
		if _, ok := c.points[k]; ok {
			out = append(out, k)
		}
	}
	return out, nil
}

func (c *collection) remove(keys []string) {
	for _, k := range keys {
		delete(c.points, k)
	}
	c.order = slices.DeleteFunc(c.order, func(k string) bool { _, ok := c.points[k]; return !ok })
}

func (s *points) Delete(_ context.Context, r *qdrant.DeletePoints) (*qdrant.PointsOperationResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	keys, err := c.selected(r.GetPoints())
	if err != nil {
		return nil, err
	}
	c.remove(keys)
	return done(), nil
}

func (s *points) SetPayload(_ context.Context, r *qdrant.SetPayloadPoints) (*qdrant.PointsOperationResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	keys, err := c.selected(r.GetPointsSelector())
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		for f, v := range r.GetPayload() {
			c.points[k].payload[f] = proto.Clone(v).(*qdrant.Value)
		}
	}
	return done(), nil
}

func retrieved(p *point, withPayload, withVectors bool) *qdrant.RetrievedPoint {
	rp := &qdrant.RetrievedPoint{Id: p.id}
	if withPayload {
		rp.Payload = clonePayload(p.payload)
	}
	if withVectors {
		rp.Vectors = &qdrant.VectorsOutput{VectorsOptions: &qdrant.VectorsOutput_Vector{Vector: &qdrant.VectorOutput{
			Vector: &qdrant.VectorOutput_Dense{Dense: &qdrant.DenseVector{Data: slices.Clone(p.vec)}},
		}}}
	}
	return rp
}

func wantPayload(w *qdrant.WithPayloadSelector) bool {
	if w == nil {
		return false
	}
	if e, ok := w.GetSelectorOptions().(*qdrant.WithPayloadSelector_Enable); ok {
		return e.Enable
	}
	return true
}

func wantVectors(w *qdrant.WithVectorsSelector) bool {
	if w == nil {
		return false
	}
	if e, ok := w.GetSelectorOptions().(*qdrant.WithVectorsSelector_Enable); ok {
		return e.Enable
	}
	return true
}

func (s *points) Get(_ context.Context, r *qdrant.GetPoints) (*qdrant.GetResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	out := &qdrant.GetResponse{}
	for _, id := range r.GetIds() {
		k, err := key(id)
		if err != nil {
			return nil, err
		}
		if p, ok := c.points[k]; ok {
			out.Result = append(out.Result, retrieved(p, wantPayload(r.GetWithPayload()), wantVectors(r.GetWithVectors())))
		}
	}
	return out, nil
}

func (s *points) Scroll(_ context.Context, r *qdrant.ScrollPoints) (*qdrant.ScrollResponse, error) {
	if r.OrderBy != nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest: scroll order_by is not implemented")
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	// Qdrant scrolls in id order; the offset is the first id of the page.
	keys := make([]string, 0, len(c.points))
	for k, p := range c.points {
		if r.GetFilter() == nil || matches(p, r.GetFilter()) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	start := 0
	if r.Offset != nil {
		off, err := key(r.GetOffset())
		if err != nil {
			return nil, err
		}
		start = sort.SearchStrings(keys, off)
	}
	limit := int(r.GetLimit())
	if limit == 0 {
		limit = 10
	}
	out := &qdrant.ScrollResponse{}
	end := min(start+limit, len(keys))
	for _, k := range keys[start:end] {
		out.Result = append(out.Result, retrieved(c.points[k], r.WithPayload == nil || wantPayload(r.GetWithPayload()), wantVectors(r.GetWithVectors())))
	}
	if end < len(keys) {
		out.NextPageOffset = c.points[keys[end]].id
	}
	return out, nil
}

func (s *points) Count(_ context.Context, r *qdrant.CountPoints) (*qdrant.CountResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	var n uint64
	for _, p := range c.points {
		if r.GetFilter() == nil || matches(p, r.GetFilter()) {
			n++
		}
	}
	return &qdrant.CountResponse{Result: &qdrant.CountResult{Count: n}}, nil
}

func (s *points) Query(_ context.Context, r *qdrant.QueryPoints) (*qdrant.QueryResponse, error) {
	if len(r.GetPrefetch()) > 0 || r.Using != nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest: prefetch and named vectors are not implemented")
	}
	q := r.GetQuery().GetNearest().GetDense().GetData()
	if q == nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest: only nearest queries with a dense vector are implemented")
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	if uint64(len(q)) != c.dim {
		return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", c.dim, len(q))
	}
	var hits []*qdrant.ScoredPoint
	for _, k := range c.order {
		p := c.points[k]
		if r.GetFilter() != nil && !matches(p, r.GetFilter()) {
			continue
		}
		score := float32(cosine(q, p.vec))
		if r.ScoreThreshold != nil && score < r.GetScoreThreshold() {
			continue
		}
		rp := retrieved(p, wantPayload(r.GetWithPayload()), wantVectors(r.GetWithVectors()))
		hits = append(hits, &qdrant.ScoredPoint{Id: p.id, Payload: rp.Payload, Score: score, Vectors: rp.Vectors})
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score > hits[j].Score })
	limit := int(r.GetLimit())
	if limit == 0 {
		limit = 10
	}
	off := int(r.GetOffset())
	if off > len(hits) {
		off = len(hits)
	}
	hits = hits[off:]
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return &qdrant.QueryResponse{Result: hits}, nil
}

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

// matches evaluates a filter as Qdrant does: every must, at least one should (when any), no
// must_not.
func matches(p *point, f *qdrant.Filter) bool {
	for _, c := range f.GetMust() {
		if !cond(p, c) {
			return false
		}
	}
	for _, c := range f.GetMustNot() {
		if cond(p, c) {
			return false
		}
	}
	if len(f.GetShould()) > 0 {
		ok := false
		for _, c := range f.GetShould() {
			if cond(p, c) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if ms := f.GetMinShould(); ms != nil {
		n := uint64(0)
		for _, c := range ms.GetConditions() {
			if cond(p, c) {
				n++
			}
		}
		if n < ms.GetMinCount() {
			return false
		}
	}
	return true
}

func cond(p *point, c *qdrant.Condition) bool {
	switch {
	case c.GetFilter() != nil:
		return matches(p, c.GetFilter())
	case c.GetHasId() != nil:
		k, _ := key(p.id)
		for _, id := range c.GetHasId().GetHasId() {
			if ik, _ := key(id); ik == k {
				return true
			}
		}
		return false
	case c.GetField() != nil:
		return field(p, c.GetField())
	default:
		// Conditions the double does not know never match, which makes a test fail visibly.
		return false
	}
}

// values returns a payload field's values: a list is its elements, anything else itself.
func values(p *point, k string) []*qdrant.Value {
	v, ok := p.payload[k]
	if !ok {
		return nil
	}
	if l := v.GetListValue(); l != nil {
		return l.GetValues()
	}
	return []*qdrant.Value{v}
}

func field(p *point, fc *qdrant.FieldCondition) bool {
	vals := values(p, fc.GetKey())
	if m := fc.GetMatch(); m != nil {
		for _, v := range vals {
			switch mv := m.GetMatchValue().(type) {
			case *qdrant.Match_Keyword:
				if s, ok := v.GetKind().(*qdrant.Value_StringValue); ok && s.StringValue == mv.Keyword {
					return true
				}
			case *qdrant.Match_Keywords:
				if s, ok := v.GetKind().(*qdrant.Value_StringValue); ok && slices.Contains(mv.Keywords.GetStrings(), s.StringValue) {
					return true
				}
			case *qdrant.Match_Boolean:
				if b, ok := v.GetKind().(*qdrant.Value_BoolValue); ok && b.BoolValue == mv.Boolean {
					return true
				}
			case *qdrant.Match_Integer:
				if i, ok := v.GetKind().(*qdrant.Value_IntegerValue); ok && i.IntegerValue == mv.Integer {
					return true
				}
			}
		}
		return false
	}
	if r := fc.GetRange(); r != nil {
		for _, v := range vals {
			var x float64
			switch n := v.GetKind().(type) {
			case *qdrant.Value_IntegerValue:
				x = float64(n.IntegerValue)
			case *qdrant.Value_DoubleValue:
				x = n.DoubleValue
			default:
				continue
			}
			if (r.Lt == nil || x < r.GetLt()) && (r.Gt == nil || x > r.GetGt()) &&
				(r.Lte == nil || x <= r.GetLte()) && (r.Gte == nil || x >= r.GetGte()) {
				return true
			}
		}
		return false
	}
	return false
}
