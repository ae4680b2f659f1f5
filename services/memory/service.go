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
	"github.com/hermes-agent/hermes/internal/workpool"
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
	convs *conversationLinks

	touches chan touchReq
	// pool runs a recall's searches of the two tiers.
	pool *workpool.Pool
	wg   sync.WaitGroup
	stop chan struct{}
	once sync.Once

	// beforeFinish, when set (tests), runs after an extraction's memories are written and
	// before its turn record is stored: the window in which a crash leaves written memories
	// of an unacknowledged event.
	beforeFinish func(ctx context.Context, turnID string)
}

// searchWorkers is how many goroutines a Service keeps for recalls' tier searches (two a
// recall); more at once run on goroutines of their own.
const searchWorkers = 32

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
		convs: newConversationLinks(), pool: workpool.New(searchWorkers),
	}
	s.wg.Add(1)
	go s.toucher()
	return s, nil
}

// Close stops the periodic maintenance and writes the pending recall statistics.
func (s *Service) Close() {
	s.once.Do(func() {
		close(s.stop)
		s.pool.Stop()
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

// embedOne is the dense vector of a text: nil with the lexical embedder.
func (s *Service) embedOne(ctx context.Context, text string) ([]float32, error) {
	if s.emb.Lexical() {
		return nil, nil
	}
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
	id           string    // deterministic id for extraction; empty means a new random one
	occurredAt   time.Time // zero: now
	speaker      string
	followsID    string // zero: the last memory written in the conversation (conversationLinks)
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
	c.speaker = strings.TrimSpace(c.speaker)
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

// write stores a candidate: an existing memory with the same id, or a near duplicate of the
// same who and what (sameWhoWhat), is updated instead of copied; memories of the same type,
// subject and speaker that give one of its attributes another value are superseded: marked
// expired, pointing at the new memory, not deleted. Without a subject nothing is superseded —
// a contradiction is never guessed across subjects.
func (s *Service) write(ctx context.Context, userID string, c candidate) (writeResult, error) {
	normalizeCandidate(&c)
	now := s.now().UTC()
	m := newMemory(userID, c, now)
	vec, err := s.embedOne(ctx, embedText(m))
	if err != nil {
		return writeResult{}, err
	}

	// The same id (a redelivered turn): update in place.
	if c.id != "" {
		if old, ok, err := s.byID(ctx, userID, c.id); err != nil {
			return writeResult{}, err
		} else if ok {
			return s.update(ctx, old.t, old.e, m, now)
		}
	}

	contradicted, sameValue, err := s.sameSubject(ctx, userID, c, m)
	if err != nil {
		return writeResult{}, err
	}
	if len(contradicted) == 0 {
		// The same subject and value restated: that memory, updated.
		if sameValue != nil {
			return s.update(ctx, sameValue.t, sameValue.e, m, now)
		}
		// A near duplicate: the same who and what, worded alike.
		t, e, ok, err := s.findDuplicate(ctx, userID, m, vec)
		if err != nil {
			return writeResult{}, err
		}
		if ok {
			return s.update(ctx, t, e, m, now)
		}
	}

	if err := s.insert(ctx, userID, c, m, vec, now); err != nil {
		return writeResult{}, err
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

// tierEntry is a stored memory with the tier that holds it.
type tierEntry struct {
	t TierStore
	e Entry
}

// newMemory is the memory candidate c would be, written at now; it has no id or tier yet.
func newMemory(userID string, c candidate, now time.Time) *memoryv1.Memory {
	m := &memoryv1.Memory{
		UserId: userID, Type: c.typ, Content: c.content, Attributes: c.attributes, Confidence: c.confidence,
		Source: c.source, SessionId: c.sessionID, TurnId: c.turnID, CreatedAt: ts(now), UpdatedAt: ts(now),
		SourceMessageIds: c.sourceMsgIDs, Subject: c.subject, Keywords: c.keywords, Speaker: c.speaker,
		OccurredAt: ts(now),
	}
	if !c.occurredAt.IsZero() {
		m.OccurredAt = ts(c.occurredAt.UTC())
	}
	return m
}

// byID finds the memory with id in either tier.
func (s *Service) byID(ctx context.Context, userID, id string) (tierEntry, bool, error) {
	for _, t := range []TierStore{s.sem, s.ep} {
		e, err := t.Get(ctx, userID, id)
		if err == nil {
			return tierEntry{t, e}, true, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return tierEntry{}, false, err
		}
	}
	return tierEntry{}, false, nil
}

// sameSubject finds the memories of the same type, subject and speaker as m: those that give
// one of c's attributes another value (contradicted), and the first that restates one of them
// for the same event (sameValue). Without a subject or attributes it finds nothing.
func (s *Service) sameSubject(ctx context.Context, userID string, c candidate, m *memoryv1.Memory) (contradicted []tierEntry, sameValue *tierEntry, err error) {
	if c.subject == "" || len(c.attributes) == 0 {
		return nil, nil, nil
	}
	for _, t := range []TierStore{s.sem, s.ep} {
		olds, err := t.BySubject(ctx, userID, c.subject)
		if err != nil {
			return nil, nil, err
		}
		for _, o := range olds {
			if o.Memory.GetType() != c.typ || !sameSpeaker(m, o.Memory) {
				continue
			}
			if conflicts(c.attributes, o.Memory.GetAttributes()) {
				contradicted = append(contradicted, tierEntry{t, o})
			} else if sameValue == nil && sharesAttr(c.attributes, o.Memory.GetAttributes()) && sameEvent(m, o.Memory) {
				sameValue = &tierEntry{t, o}
			}
		}
	}
	return contradicted, sameValue, nil
}

// insert stores m as a new memory: it gets c's id or a new one, its tier, and the memory it
// follows in its conversation.
func (s *Service) insert(ctx context.Context, userID string, c candidate, m *memoryv1.Memory, vec []float32, now time.Time) error {
	m.Id = c.id
	if m.Id == "" {
		m.Id = newID()
	}
	m.Tier = s.chooseTier(c)
	m.FollowsId = c.followsID
	if m.FollowsId == "" {
		m.FollowsId = s.convs.previous(m)
	}
	if err := s.state.AddUser(ctx, userID); err != nil {
		return err
	}
	if err := s.tier(m.Tier).Put(ctx, Entry{Memory: m, Vector: vec}); err != nil {
		return err
	}
	s.convs.record(m)
	if m.Tier == memoryv1.Tier_TIER_EPISODIC && s.cfg.EpisodicTTL > 0 {
		m.ExpiresAt = ts(now.Add(s.cfg.EpisodicTTL)) // what the store set, for the caller
	}
	return nil
}

// findDuplicate finds a live memory that m restates: one of the same who and what
// (sameWhoWhat) whose wording is at least memory.(lexical-)duplicate-similarity alike (the
// model's cosine with a model embedder, the shared words otherwise). Text similarity alone
// never decides: two people saying "thanks, see you tomorrow" are two memories.
func (s *Service) findDuplicate(ctx context.Context, userID string, m *memoryv1.Memory, vec []float32) (TierStore, Entry, bool, error) {
	q := SearchQuery{Lexical: lexQuery(m.GetContent()), MinLexical: 1e-9, Limit: 8, Types: []memoryv1.MemoryType{m.GetType()}}
	if len(vec) > 0 {
		q = SearchQuery{Vector: vec, MinSimilarity: s.cfg.DuplicateSimilarity, Limit: 8, Types: []memoryv1.MemoryType{m.GetType()}}
	}
	best, bestSim := -1, 0.0
	var cands []struct {
		t TierStore
		h Hit
	}
	for _, t := range []TierStore{s.sem, s.ep} {
		hits, err := t.Search(ctx, userID, q)
		if err != nil {
			return nil, Entry{}, false, err
		}
		for _, h := range hits {
			if !sameWhoWhat(m, h.Memory) {
				continue
			}
			sim := h.Similarity
			if len(vec) == 0 {
				sim = contentSimilarity(m.GetContent(), h.Memory.GetContent())
			}
			if sim >= s.duplicateSimilarity() && sim > bestSim {
				best, bestSim = len(cands), sim
			}
			cands = append(cands, struct {
				t TierStore
				h Hit
			}{t, h})
		}
	}
	if best < 0 {
		return nil, Entry{}, false, nil
	}
	c := cands[best]
	e, err := c.t.Get(ctx, userID, c.h.Memory.GetId()) // with its vector, which Search may leave out
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, Entry{}, false, nil
		}
		return nil, Entry{}, false, err
	}
	return c.t, e, true, nil
}

// sameWhoWhat reports whether two memories may be one: the same type, the same subject and
// speaker where both are known, attributes that agree (no key with another value), and, for
// events, the same day.
func sameWhoWhat(a, b *memoryv1.Memory) bool {
	if a.GetType() != b.GetType() || !sameSpeaker(a, b) || !sameIfKnown(normalizeSubject(a.GetSubject()), normalizeSubject(b.GetSubject())) {
		return false
	}
	return !conflicts(a.GetAttributes(), b.GetAttributes()) && sameEvent(a, b)
}

// sameSpeaker: two memories of different known speakers are never one.
func sameSpeaker(a, b *memoryv1.Memory) bool {
	return sameIfKnown(normalizeText(a.GetSpeaker()), normalizeText(b.GetSpeaker()))
}

func sameIfKnown(a, b string) bool { return a == "" || b == "" || a == b }

// sameEvent: two events that happened on different days are two events, however alike.
func sameEvent(a, b *memoryv1.Memory) bool {
	if a.GetType() != memoryv1.MemoryType_MEMORY_TYPE_EVENT {
		return true
	}
	d := occurredAt(a).Sub(occurredAt(b))
	return d < 24*time.Hour && d > -24*time.Hour
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
func (s *Service) update(ctx context.Context, t TierStore, old Entry, m *memoryv1.Memory, now time.Time) (writeResult, error) {
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
	if m.GetSpeaker() != "" && e.GetSpeaker() == "" {
		e.Speaker = m.GetSpeaker()
	}
	if m.GetOccurredAt() != nil {
		e.OccurredAt = m.GetOccurredAt()
	}
	e.Confidence = max(e.GetConfidence(), m.GetConfidence())
	e.UpdatedAt = ts(now)
	nv, err := s.embedOne(ctx, embedText(e))
	if err != nil {
		return writeResult{}, err
	}
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
