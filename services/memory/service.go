package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hermes-agent/hermes/internal/model"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// Completer is the part of the model client extraction needs (internal/model's *Client has it).
type Completer interface {
	Complete(ctx context.Context, req model.Request) (*model.Response, error)
}

// Options are the service's collaborators.
type Options struct {
	// Episodic and Semantic are the two tiers.
	Episodic TierStore
	Semantic TierStore
	// State holds counters, turn records, the user registry and the maintenance lock.
	State StateStore
	// Embedder turns memories and queries into vectors.
	Embedder Embedder
	// Model extracts memories from turns; nil makes extraction fail with FailedPrecondition.
	Model Completer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Now replaces the clock (tests).
	Now func() time.Time
}

// Service is the memory service. Its gRPC methods are in server.go; the NATS consumer in
// consumer.go calls the same extraction code as ExtractTurn.
type Service struct {
	memoryv1.UnimplementedMemoryServiceServer

	cfg   Config
	ep    TierStore
	sem   TierStore
	state StateStore
	emb   Embedder
	model Completer
	log   *slog.Logger
	now   func() time.Time

	touches chan touchReq
	wg      sync.WaitGroup
	stop    chan struct{}
	once    sync.Once

	// beforeFinish, when set (tests), runs after an extraction's memories are written and
	// before its turn record is stored: the window in which a crash leaves written memories
	// of an unacknowledged event.
	beforeFinish func(ctx context.Context, turnID string)
}

// NewService returns the service. Close stops its background work.
func NewService(cfg Config, o Options) (*Service, error) {
	if o.Episodic == nil || o.Semantic == nil || o.State == nil || o.Embedder == nil {
		return nil, errors.New("memory: episodic, semantic, state and embedder are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Service{
		cfg: cfg, ep: o.Episodic, sem: o.Semantic, state: o.State, emb: o.Embedder, model: o.Model,
		log: o.Logger, now: o.Now, touches: make(chan touchReq, 1024), stop: make(chan struct{}),
	}
	s.wg.Add(1)
	go s.toucher()
	return s, nil
}

// Close stops the periodic maintenance and writes the pending recall statistics.
func (s *Service) Close() {
	s.once.Do(func() {
		close(s.stop)
	})
	s.wg.Wait()
}

// EmbedderName names the embedder in use.
func (s *Service) EmbedderName() string { return s.emb.Name() }

// minSimilarity is the default recall threshold of the configured embedder.
func (s *Service) minSimilarity() float64 {
	if s.emb.Lexical() {
		return s.cfg.LexicalMinSimilarity
	}
	return s.cfg.MinSimilarity
}

// duplicateSimilarity is the similarity at which a new memory updates an existing one.
func (s *Service) duplicateSimilarity() float64 {
	if s.emb.Lexical() {
		return s.cfg.LexicalDuplicateSimilarity
	}
	return s.cfg.DuplicateSimilarity
}

func (s *Service) tier(t memoryv1.Tier) TierStore {
	if t == memoryv1.Tier_TIER_SEMANTIC {
		return s.sem
	}
	return s.ep
}

func (s *Service) embedOne(ctx context.Context, text string) ([]float32, error) {
	v, err := s.emb.Embed(ctx, []string{text})
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	return v[0], nil
}

// candidate is a memory to write, from Remember, extraction or a habit.
type candidate struct {
	typ          memoryv1.MemoryType
	content      string
	attributes   map[string]string
	subject      string
	keywords     []string
	confidence   float64
	source       memoryv1.Source
	tier         memoryv1.Tier // forced tier; unspecified lets the service choose
	sessionID    string
	turnID       string
	sourceMsgIDs []string
	id           string // deterministic id for extraction; empty means a new random one
}

// writeResult is what a write did.
type writeResult struct {
	memory     *memoryv1.Memory
	updated    bool     // an existing memory (near duplicate, or the same id) was updated
	superseded []string // memories the new one superseded
}

// chooseTier places a memory: events are episodic; stated preferences, facts, settings and
// habits with high confidence (or that the user asked to keep) are semantic; the rest start
// episodic and are promoted when recalled often.
func (s *Service) chooseTier(c candidate) memoryv1.Tier {
	if c.tier != memoryv1.Tier_TIER_UNSPECIFIED {
		return c.tier
	}
	if c.typ == memoryv1.MemoryType_MEMORY_TYPE_EVENT {
		return memoryv1.Tier_TIER_EPISODIC
	}
	if c.source == memoryv1.Source_SOURCE_USER_REQUEST || c.confidence >= s.cfg.SemanticMinConfidence {
		return memoryv1.Tier_TIER_SEMANTIC
	}
	return memoryv1.Tier_TIER_EPISODIC
}

// normalizeCandidate makes subjects, attribute keys and keywords comparable.
func normalizeCandidate(c *candidate) {
	c.subject = normalizeSubject(c.subject)
	attrs := make(map[string]string, len(c.attributes))
	for k, v := range c.attributes {
		nk := normalizeAttrKey(k)
		v = norm1(v)
		if nk != "" && v != "" {
			attrs[nk] = v
		}
	}
	c.attributes = attrs
	var kws []string
	for _, k := range c.keywords {
		if k = norm1(k); k != "" && !slices.Contains(kws, k) {
			kws = append(kws, k)
		}
	}
	c.keywords = kws
}

// norm1 trims and folds width (not case: values are shown to the model and the user as given).
func norm1(s string) string { return strings.TrimSpace(s) }

// conflicts reports whether two attribute sets give one key different values.
func conflicts(a, b map[string]string) bool {
	for k, v := range a {
		if w, ok := b[k]; ok && normalizeText(v) != normalizeText(w) {
			return true
		}
	}
	return false
}

// write stores a candidate: an existing memory with the same id or a near duplicate of the same
// type and without conflicting attributes is updated instead of copied; memories of the same
// type and subject that give one of its attributes another value are superseded: marked
// expired, pointing at the new memory, not deleted. Without a subject nothing is superseded —
// a contradiction is never guessed across subjects.
func (s *Service) write(ctx context.Context, userID string, c candidate) (writeResult, error) {
	normalizeCandidate(&c)
	now := s.now().UTC()
	m := &memoryv1.Memory{
		UserId: userID, Type: c.typ, Content: c.content, Attributes: c.attributes, Confidence: c.confidence,
		Source: c.source, SessionId: c.sessionID, TurnId: c.turnID, CreatedAt: ts(now), UpdatedAt: ts(now),
		SourceMessageIds: c.sourceMsgIDs, Subject: c.subject, Keywords: c.keywords,
	}
	vec, err := s.embedOne(ctx, embedText(m))
	if err != nil {
		return writeResult{}, err
	}

	// The same id (a redelivered turn): update in place.
	if c.id != "" {
		for _, t := range []TierStore{s.sem, s.ep} {
			if e, err := t.Get(ctx, userID, c.id); err == nil {
				return s.update(ctx, t, e, m, vec, now)
			} else if !errors.Is(err, ErrNotFound) {
				return writeResult{}, err
			}
		}
	}

	// Contradictions: same type and subject, a shared attribute with another value.
	var contradicted []struct {
		t TierStore
		e Entry
	}
	var sameValue *struct {
		t TierStore
		e Entry
	}
	if c.subject != "" && len(c.attributes) > 0 {
		for _, t := range []TierStore{s.sem, s.ep} {
			olds, err := t.BySubject(ctx, userID, c.subject)
			if err != nil {
				return writeResult{}, err
			}
			for _, o := range olds {
				if o.Memory.GetType() != c.typ {
					continue
				}
				if conflicts(c.attributes, o.Memory.GetAttributes()) {
					contradicted = append(contradicted, struct {
						t TierStore
						e Entry
					}{t, o})
				} else if sameValue == nil && sharesAttr(c.attributes, o.Memory.GetAttributes()) {
					sameValue = &struct {
						t TierStore
						e Entry
					}{t, o}
				}
			}
		}
	}
	if len(contradicted) == 0 {
		// The same subject and value restated: that memory, updated.
		if sameValue != nil {
			return s.update(ctx, sameValue.t, sameValue.e, m, vec, now)
		}
		// Near duplicates of the same type without conflicting attributes. The index vectors
		// include subject, attributes and keywords, which a restatement may lack, so the index
		// only proposes candidates and the contents themselves are compared.
		dupQ := SearchQuery{Vector: vec, MinSimilarity: s.duplicateSimilarity() - 0.3, Limit: 5, Types: []memoryv1.MemoryType{c.typ}}
		type dupCand struct {
			t TierStore
			h Hit
		}
		var cands []dupCand
		texts := []string{c.content}
		for _, t := range []TierStore{s.sem, s.ep} {
			hits, err := t.Search(ctx, userID, dupQ)
			if err != nil {
				return writeResult{}, err
			}
			for _, h := range hits {
				if !conflicts(c.attributes, h.Memory.GetAttributes()) {
					cands = append(cands, dupCand{t, h})
					texts = append(texts, h.Memory.GetContent())
				}
			}
		}
		if len(cands) > 0 {
			vs, err := s.emb.Embed(ctx, texts)
			if err != nil {
				return writeResult{}, fmt.Errorf("embed: %w", err)
			}
			best, bestSim := -1, s.duplicateSimilarity()
			for i := range cands {
				if sim := cosine(vs[0], vs[i+1]); sim >= bestSim {
					best, bestSim = i, sim
				}
			}
			if best >= 0 {
				return s.update(ctx, cands[best].t, cands[best].h.Entry, m, vec, now)
			}
		}
	}

	m.Id = c.id
	if m.Id == "" {
		m.Id = newID()
	}
	m.Tier = s.chooseTier(c)
	if err := s.state.AddUser(ctx, userID); err != nil {
		return writeResult{}, err
	}
	if err := s.tier(m.Tier).Put(ctx, Entry{Memory: m, Vector: vec}); err != nil {
		return writeResult{}, err
	}
	if m.Tier == memoryv1.Tier_TIER_EPISODIC && s.cfg.EpisodicTTL > 0 {
		m.ExpiresAt = ts(now.Add(s.cfg.EpisodicTTL)) // what the store set, for the caller
	}
	res := writeResult{memory: m}
	for _, o := range contradicted {
		old := o.e.Memory
		old.ExpiredAt = ts(now)
		old.SupersededBy = m.Id
		if err := o.t.Put(ctx, o.e); err != nil {
			return res, fmt.Errorf("supersede %s: %w", old.GetId(), err)
		}
		res.superseded = append(res.superseded, old.GetId())
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.DebugContext(ctx, "memory written", "user", userID, "id", m.Id, "type", typeName(m.Type), "tier", m.Tier.String(), "superseded", res.superseded)
	}
	return res, nil
}

func sharesAttr(a, b map[string]string) bool {
	for k := range a {
		if _, ok := b[k]; ok {
			return true
		}
	}
	return false
}

// update merges a new statement into an existing memory: the newer wording, the union of
// attributes, keywords and source messages, the higher confidence.
func (s *Service) update(ctx context.Context, t TierStore, old Entry, m *memoryv1.Memory, vec []float32, now time.Time) (writeResult, error) {
	e := old.Memory
	e.Content = m.GetContent()
	attrs := maps.Clone(e.GetAttributes())
	if attrs == nil {
		attrs = map[string]string{}
	}
	maps.Copy(attrs, m.GetAttributes())
	e.Attributes = attrs
	e.Keywords = appendNew(e.Keywords, m.GetKeywords(), maxKeywords)
	e.SourceMessageIds = appendNew(e.SourceMessageIds, m.GetSourceMessageIds(), maxSourceMessages)
	if m.GetSubject() != "" && e.GetSubject() == "" {
		e.Subject = m.GetSubject()
	}
	e.Confidence = max(e.GetConfidence(), m.GetConfidence())
	e.UpdatedAt = ts(now)
	nv, err := s.embedOne(ctx, embedText(e))
	if err != nil {
		return writeResult{}, err
	}
	_ = vec
	if err := t.Put(ctx, Entry{Memory: e, Vector: nv}); err != nil {
		return writeResult{}, err
	}
	return writeResult{memory: e, updated: true}, nil
}

// touchReq is a recall to record on the memories it returned.
type touchReq struct {
	userID string
	ep     []string
	sem    []string
	at     time.Time
	// done, when set, is closed once the request (and so every one queued before it) is
	// recorded.
	done chan struct{}
}

// toucher records recalls in the background, so Recall answers without waiting for a write.
func (s *Service) toucher() {
	defer s.wg.Done()
	for {
		select {
		case r := <-s.touches:
			s.touch(r)
		case <-s.stop:
			for {
				select {
				case r := <-s.touches:
					s.touch(r)
				default:
					return
				}
			}
		}
	}
}

func (s *Service) touch(r touchReq) {
	if r.done != nil {
		defer close(r.done)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(r.ep) > 0 {
		if _, err := s.ep.Touch(ctx, r.userID, r.ep, r.at); err != nil {
			s.log.Warn("recording recall", "error", err)
		}
	}
	if len(r.sem) > 0 {
		if _, err := s.sem.Touch(ctx, r.userID, r.sem, r.at); err != nil {
			s.log.Warn("recording recall", "error", err)
		}
	}
}

// flushTouches waits until the recalls queued so far are recorded (tests): the toucher handles
// requests in order, so when a marker queued now is done, so is everything before it.
func (s *Service) flushTouches() {
	done := make(chan struct{})
	select {
	case s.touches <- touchReq{done: done}:
	case <-s.stop:
		return
	}
	select {
	case <-done:
	case <-s.stop:
		<-done // Close drains the queue, marker included
	}
}
