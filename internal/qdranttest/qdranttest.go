// Package qdranttest is a test double of Qdrant — it is NOT Qdrant. It is an in-process gRPC
// server implementing the part of Qdrant's Collections, Points and Qdrant services (the
// go-client's generated interfaces) that Hermes' memory store uses: collections with an unnamed
// dense vector or named dense vectors (cosine distance) and named sparse vectors (with or
// without the IDF modifier); upsert, get, delete by ids or filter, set payload, scroll, count;
// and the Query API: a nearest query on a dense or sparse vector by exact search with a score
// threshold, or prefetches (each a nearest query with its own filter, threshold and limit)
// fused by RRF, filtered by must / should / must_not conditions on keyword, bool and integer
// payload fields and point ids. Scoring follows Qdrant's documentation: cosine for dense
// vectors; for sparse ones the dot product over shared indices, each query weight multiplied,
// with the IDF modifier, by ln(1 + (N − df + 0.5)/(df + 0.5)), N the points with that vector and
// df those with the index, over the whole collection; RRF sums 1/(k + position), positions from
// 0. Anything else answers UNIMPLEMENTED, so a store that starts relying on more fails loudly
// in tests.
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

// envAddr names the variable with a real Qdrant's gRPC address (host:6334).
const envAddr = "HERMES_TEST_QDRANT_ADDR"

// Addr returns the address tests should use: a real Qdrant when HERMES_TEST_QDRANT_ADDR is set,
// otherwise a double started for the test and stopped at its end.
func Addr(t testing.TB) string {
	t.Helper()
	if a := os.Getenv(envAddr); a != "" {
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

	mu    sync.Mutex // guards colls and everything under it
	colls map[string]*collection
}

type collection struct {
	dense   map[string]*qdrant.VectorParams // "" is the unnamed vector
	sparse  map[string]qdrant.Modifier
	points  map[string]*point // by uuid
	order   []string          // insertion order, for stable scrolls
	indexes map[string]qdrant.FieldType
}

type point struct {
	id      *qdrant.PointId
	dense   map[string][]float32
	sparse  map[string]sparseVec
	payload map[string]*qdrant.Value
}

type sparseVec struct {
	idx []uint32
	val []float32
}

// Start runs a double on a random loopback port.
func Start() (*Double, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	// The go-client pings every 10 s; allow it, as Qdrant does.
	// Qdrant's server (tonic over hyper) keeps hyper's fixed 1 MiB HTTP/2 windows (the adaptive
	// window is opt-in), so it sends no BDP pings; neither does the double.
	srv := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.StaticStreamWindowSize(1<<20), grpc.StaticConnWindowSize(1<<20))
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
	c := &collection{dense: map[string]*qdrant.VectorParams{}, sparse: map[string]qdrant.Modifier{}, points: map[string]*point{}, indexes: map[string]qdrant.FieldType{}}
	if p := r.GetVectorsConfig().GetParams(); p != nil {
		c.dense[""] = p
	}
	for name, p := range r.GetVectorsConfig().GetParamsMap().GetMap() {
		c.dense[name] = p
	}
	for name, p := range r.GetSparseVectorsConfig().GetMap() {
		c.sparse[name] = p.GetModifier()
	}
	for _, p := range c.dense {
		if p.GetDistance() != qdrant.Distance_Cosine {
			return nil, status.Error(codes.Unimplemented, "qdranttest: only cosine distance is supported")
		}
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if _, ok := s.d.colls[r.GetCollectionName()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "Wrong input: Collection `%s` already exists!", r.GetCollectionName())
	}
	s.d.colls[r.GetCollectionName()] = c
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
		Config:        &qdrant.CollectionConfig{Params: c.params()},
	}}, nil
}

func (c *collection) params() *qdrant.CollectionParams {
	p := &qdrant.CollectionParams{}
	if u, ok := c.dense[""]; ok {
		p.VectorsConfig = qdrant.NewVectorsConfig(u)
	} else if len(c.dense) > 0 {
		p.VectorsConfig = qdrant.NewVectorsConfigMap(c.dense)
	}
	if len(c.sparse) > 0 {
		m := map[string]*qdrant.SparseVectorParams{}
		for name, mod := range c.sparse {
			m[name] = &qdrant.SparseVectorParams{Modifier: &mod}
		}
		p.SparseVectorsConfig = qdrant.NewSparseVectorsConfig(m)
	}
	return p
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
		pt := &point{id: p.GetId(), dense: map[string][]float32{}, sparse: map[string]sparseVec{}, payload: clonePayload(p.GetPayload())}
		named := map[string]*qdrant.Vector{"": p.GetVectors().GetVector()}
		if nv := p.GetVectors().GetVectors(); nv != nil {
			named = nv.GetVectors()
		}
		for name, v := range named {
			if v == nil {
				continue
			}
			if sp := v.GetSparse(); sp != nil {
				if _, ok := c.sparse[name]; !ok {
					return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Not existing vector name error: %s", name)
				}
				if len(sp.GetIndices()) != len(sp.GetValues()) {
					return nil, status.Error(codes.InvalidArgument, "Wrong input: sparse indices and values differ in length")
				}
				pt.sparse[name] = sortSparse(sp.GetIndices(), sp.GetValues())
				continue
			}
			data := v.GetDense().GetData()
			if data == nil {
				data = v.GetData() //nolint:staticcheck // the deprecated form is still sent
			}
			params, ok := c.dense[name]
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Not existing vector name error: %s", name)
			}
			if uint64(len(data)) != params.GetSize() {
				return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", params.GetSize(), len(data))
			}
			pt.dense[name] = slices.Clone(data)
		}
		if _, ok := c.points[k]; !ok {
			c.order = append(c.order, k)
		}
		c.points[k] = pt
	}
	return done(), nil
}

func sortSparse(idx []uint32, val []float32) sparseVec {
	order := make([]int, len(idx))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return idx[order[a]] < idx[order[b]] })
	v := sparseVec{idx: make([]uint32, len(idx)), val: make([]float32, len(idx))}
	for i, j := range order {
		v.idx[i], v.val[i] = idx[j], val[j]
	}
	return v
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
		if v, ok := p.dense[""]; ok {
			rp.Vectors = &qdrant.VectorsOutput{VectorsOptions: &qdrant.VectorsOutput_Vector{Vector: &qdrant.VectorOutput{
				Vector: &qdrant.VectorOutput_Dense{Dense: &qdrant.DenseVector{Data: slices.Clone(v)}},
			}}}
			return rp
		}
		named := map[string]*qdrant.VectorOutput{}
		for name, v := range p.dense {
			named[name] = &qdrant.VectorOutput{Vector: &qdrant.VectorOutput_Dense{Dense: &qdrant.DenseVector{Data: slices.Clone(v)}}}
		}
		for name, v := range p.sparse {
			named[name] = &qdrant.VectorOutput{Vector: &qdrant.VectorOutput_Sparse{Sparse: &qdrant.SparseVector{Indices: slices.Clone(v.idx), Values: slices.Clone(v.val)}}}
		}
		rp.Vectors = &qdrant.VectorsOutput{VectorsOptions: &qdrant.VectorsOutput_Vectors{Vectors: &qdrant.NamedVectorsOutput{Vectors: named}}}
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
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.coll(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	limit := int(r.GetLimit())
	if limit == 0 {
		limit = 10
	}
	var hits []*qdrant.ScoredPoint
	if len(r.GetPrefetch()) > 0 {
		k := uint32(2)
		switch {
		case r.GetQuery().GetRrf() != nil:
			if r.GetQuery().GetRrf().K != nil {
				k = r.GetQuery().GetRrf().GetK()
			}
			if len(r.GetQuery().GetRrf().GetWeights()) > 0 {
				return nil, status.Error(codes.Unimplemented, "qdranttest: weighted RRF is not implemented")
			}
		case r.GetQuery() != nil && r.GetQuery().GetFusion() == qdrant.Fusion_RRF:
		default:
			return nil, status.Error(codes.Unimplemented, "qdranttest: only RRF fusion of prefetches is implemented")
		}
		var lists [][]*qdrant.ScoredPoint
		for _, pf := range r.GetPrefetch() {
			if len(pf.GetPrefetch()) > 0 {
				return nil, status.Error(codes.Unimplemented, "qdranttest: nested prefetch is not implemented")
			}
			pl := int(pf.GetLimit())
			if pl == 0 {
				pl = 10
			}
			l, err := c.nearest(pf.GetQuery(), pf.GetUsing(), pf.GetFilter(), pf.ScoreThreshold, pl)
			if err != nil {
				return nil, err
			}
			lists = append(lists, l)
		}
		hits = rrf(lists, float32(k))
		hits = slices.DeleteFunc(hits, func(h *qdrant.ScoredPoint) bool {
			k, _ := key(h.GetId())
			return r.GetFilter() != nil && !matches(c.points[k], r.GetFilter())
		})
	} else {
		hits, err = c.nearest(r.GetQuery(), r.GetUsing(), r.GetFilter(), r.ScoreThreshold, int(r.GetOffset())+limit)
		if err != nil {
			return nil, err
		}
	}
	off := min(int(r.GetOffset()), len(hits))
	hits = hits[off:]
	if len(hits) > limit {
		hits = hits[:limit]
	}
	for _, h := range hits {
		k, _ := key(h.GetId())
		rp := retrieved(c.points[k], wantPayload(r.GetWithPayload()), wantVectors(r.GetWithVectors()))
		h.Payload, h.Vectors = rp.Payload, rp.Vectors
	}
	return &qdrant.QueryResponse{Result: hits}, nil
}

// nearest scores every point matching the filter against a nearest query on the named dense or
// sparse vector, best first, at most limit.
func (c *collection) nearest(q *qdrant.Query, using string, f *qdrant.Filter, threshold *float32, limit int) ([]*qdrant.ScoredPoint, error) {
	in := q.GetNearest()
	if in == nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest: only nearest queries are implemented")
	}
	var score func(p *point) (float32, bool)
	if sp := in.GetSparse(); sp != nil {
		mod, ok := c.sparse[using]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Not existing vector name error: %s", using)
		}
		qv := sortSparse(sp.GetIndices(), sp.GetValues())
		w := slices.Clone(qv.val)
		if mod == qdrant.Modifier_Idf {
			n := 0
			df := make([]int, len(qv.idx))
			for _, p := range c.points {
				v, ok := p.sparse[using]
				if !ok {
					continue
				}
				n++
				for i, ix := range qv.idx {
					if _, found := slices.BinarySearch(v.idx, ix); found {
						df[i]++
					}
				}
			}
			for i := range w {
				w[i] *= float32(math.Log((float64(n-df[i])+0.5)/(float64(df[i])+0.5) + 1))
			}
		}
		score = func(p *point) (float32, bool) {
			v, ok := p.sparse[using]
			if !ok {
				return 0, false
			}
			var s float32
			shared := false
			i, j := 0, 0
			for i < len(qv.idx) && j < len(v.idx) {
				switch {
				case qv.idx[i] < v.idx[j]:
					i++
				case qv.idx[i] > v.idx[j]:
					j++
				default:
					s += w[i] * v.val[j]
					shared = true
					i++
					j++
				}
			}
			return s, shared // a sparse search reaches only points sharing an index
		}
	} else {
		qd := in.GetDense().GetData()
		params, ok := c.dense[using]
		if qd == nil || !ok {
			return nil, status.Error(codes.Unimplemented, "qdranttest: only dense or sparse nearest queries on an existing vector are implemented")
		}
		if uint64(len(qd)) != params.GetSize() {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", params.GetSize(), len(qd))
		}
		score = func(p *point) (float32, bool) {
			v, ok := p.dense[using]
			if !ok {
				return 0, false
			}
			return float32(cosine(qd, v)), true
		}
	}
	var hits []*qdrant.ScoredPoint
	for _, k := range c.order {
		p := c.points[k]
		if f != nil && !matches(p, f) {
			continue
		}
		sc, ok := score(p)
		if !ok || (threshold != nil && sc < *threshold) {
			continue
		}
		hits = append(hits, &qdrant.ScoredPoint{Id: p.id, Score: sc})
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score > hits[j].Score })
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits, nil
}

// rrf fuses ranked lists: a point scores Σ 1/(k + position), positions from 0.
func rrf(lists [][]*qdrant.ScoredPoint, k float32) []*qdrant.ScoredPoint {
	sum := map[string]float32{}
	ids := map[string]*qdrant.PointId{}
	var order []string
	for _, l := range lists {
		for pos, h := range l {
			id, _ := key(h.GetId())
			if _, ok := ids[id]; !ok {
				ids[id] = h.GetId()
				order = append(order, id)
			}
			sum[id] += 1 / (k + float32(pos))
		}
	}
	out := make([]*qdrant.ScoredPoint, len(order))
	for i, id := range order {
		out[i] = &qdrant.ScoredPoint{Id: ids[id], Score: sum[id]}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Score > out[j].Score })
	return out
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
