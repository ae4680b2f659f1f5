package memory

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// Request limits.
const (
	maxQueryBytes     = 4000
	maxRecallLimit    = 20
	defaultLimit      = 5
	maxPageSize       = 1000
	defaultPageSize   = 100
	maxBehaviorKey    = 256
	maxDescription    = 500
	maxTurnMessages   = 200
	maxTurnTextBytes  = 256 << 10
	maxIDBytes        = 128
	maxRecallAttrKeys = 16
)

// validUserID checks a user id: required, bounded, printable.
func validUserID(v *rpc.Violations, field, id string) {
	switch {
	case id == "":
		v.Add(field, "is required")
	case len(id) > maxUserIDBytes:
		v.Add(field, "is %d bytes; at most %d are allowed", len(id), maxUserIDBytes)
	case !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0:
		v.Add(field, "must be valid UTF-8 without control characters")
	}
}

func validText(v *rpc.Violations, field, s string, maxBytes int, required bool) {
	switch {
	case s == "" && required:
		v.Add(field, "is required")
	case len(s) > maxBytes:
		v.Add(field, "is %d bytes; at most %d are allowed", len(s), maxBytes)
	case !utf8.ValidString(s):
		v.Add(field, "must be valid UTF-8")
	}
}

func validType(v *rpc.Violations, field string, t memoryv1.MemoryType, required bool) {
	if t == memoryv1.MemoryType_MEMORY_TYPE_UNSPECIFIED {
		if required {
			v.Add(field, "is required (preference, fact, event, habit or config)")
		}
		return
	}
	if _, ok := memoryv1.MemoryType_name[int32(t)]; !ok {
		v.Add(field, "is not a known memory type")
	}
}

// maxMinSimilarity is the highest threshold a Recall may ask for: a cosine is at most 1; a BM25
// score has no fixed bound, so a generous one.
func maxMinSimilarity(emb Embedder) float64 {
	if emb.Lexical() {
		return 1000
	}
	return 1
}

// validTime checks an optional timestamp.
func validTime(v *rpc.Violations, field string, t *timestamppb.Timestamp) {
	if t != nil && t.CheckValid() != nil {
		v.Add(field, "is not a valid timestamp")
	}
}

// optTime is an optional timestamp as a time, zero when unset.
func optTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// Remember implements MemoryService.
func (s *Service) Remember(ctx context.Context, req *memoryv1.RememberRequest) (*memoryv1.RememberResponse, error) {
	var v rpc.Violations
	validUserID(&v, "user_id", req.GetUserId())
	validType(&v, "type", req.GetType(), true)
	validText(&v, "content", strings.TrimSpace(req.GetContent()), maxContentBytes, true)
	if len(req.GetAttributes()) > maxAttributes {
		v.Add("attributes", "has %d entries; at most %d are allowed", len(req.GetAttributes()), maxAttributes)
	}
	for k, val := range req.GetAttributes() {
		validText(&v, fmt.Sprintf("attributes[%q]", k), k, maxAttrKeyBytes, true)
		validText(&v, fmt.Sprintf("attributes[%q]", k), val, maxAttrValueBytes, false)
	}
	if c := req.GetConfidence(); c < 0 || c > 1 {
		v.Add("confidence", "must be between 0 and 1")
	}
	if _, ok := memoryv1.Tier_name[int32(req.GetTier())]; !ok {
		v.Add("tier", "is not a known tier")
	}
	if _, ok := memoryv1.Source_name[int32(req.GetSource())]; !ok {
		v.Add("source", "is not a known source")
	}
	validText(&v, "session_id", req.GetSessionId(), maxIDBytes, false)
	validText(&v, "turn_id", req.GetTurnId(), maxIDBytes, false)
	validText(&v, "subject", req.GetSubject(), maxSubjectBytes, false)
	if len(req.GetKeywords()) > maxKeywords {
		v.Add("keywords", "has %d entries; at most %d are allowed", len(req.GetKeywords()), maxKeywords)
	}
	for i, k := range req.GetKeywords() {
		validText(&v, fmt.Sprintf("keywords[%d]", i), k, maxKeywordBytes, false)
	}
	if len(req.GetSourceMessageIds()) > maxSourceMessages {
		v.Add("source_message_ids", "has %d entries; at most %d are allowed", len(req.GetSourceMessageIds()), maxSourceMessages)
	}
	for i, id := range req.GetSourceMessageIds() {
		validText(&v, fmt.Sprintf("source_message_ids[%d]", i), id, maxIDBytes, false)
	}
	validText(&v, "speaker", req.GetSpeaker(), maxSpeakerBytes, false)
	validText(&v, "follows_id", req.GetFollowsId(), maxIDBytes, false)
	validTime(&v, "occurred_at", req.GetOccurredAt())
	if err := v.Err(); err != nil {
		return nil, err
	}
	conf := req.GetConfidence()
	if conf == 0 {
		conf = 1
	}
	src := req.GetSource()
	if src == memoryv1.Source_SOURCE_UNSPECIFIED {
		src = memoryv1.Source_SOURCE_USER_REQUEST
	}
	res, err := s.write(ctx, req.GetUserId(), candidate{
		typ: req.GetType(), content: strings.TrimSpace(req.GetContent()), attributes: req.GetAttributes(),
		subject: req.GetSubject(), keywords: req.GetKeywords(), confidence: conf, source: src, tier: req.GetTier(),
		sessionID: req.GetSessionId(), turnID: req.GetTurnId(), sourceMsgIDs: req.GetSourceMessageIds(),
		speaker: req.GetSpeaker(), occurredAt: optTime(req.GetOccurredAt()), followsID: req.GetFollowsId(),
	})
	if err != nil {
		return nil, err
	}
	return &memoryv1.RememberResponse{Memory: res.memory, UpdatedExisting: res.updated, SupersededIds: res.superseded}, nil
}

// Recall implements MemoryService.
func (s *Service) Recall(ctx context.Context, req *memoryv1.RecallRequest) (*memoryv1.RecallResponse, error) {
	var v rpc.Violations
	validUserID(&v, "user_id", req.GetUserId())
	validText(&v, "query", strings.TrimSpace(req.GetQuery()), maxQueryBytes, true)
	if l := req.GetLimit(); l < 0 || l > maxRecallLimit {
		v.Add("limit", "must be between 1 and %d (0 means %d)", maxRecallLimit, defaultLimit)
	}
	if ms := req.GetMinSimilarity(); req.MinSimilarity != nil && (math.IsNaN(ms) || ms < -1 || ms > maxMinSimilarity(s.emb)) {
		v.Add("min_similarity", "must be between -1 and %g", maxMinSimilarity(s.emb))
	}
	validTime(&v, "occurred_after", req.GetOccurredAfter())
	validTime(&v, "occurred_before", req.GetOccurredBefore())
	validTime(&v, "reference_time", req.GetReferenceTime())
	if req.GetMaxAge() != nil {
		if err := req.GetMaxAge().CheckValid(); err != nil || req.GetMaxAge().AsDuration() < 0 {
			v.Add("max_age", "must be a non-negative duration")
		}
	}
	for i, t := range req.GetTypes() {
		validType(&v, fmt.Sprintf("types[%d]", i), t, true)
	}
	if len(req.GetAttributeKeys()) > maxRecallAttrKeys {
		v.Add("attribute_keys", "has %d entries; at most %d are allowed", len(req.GetAttributeKeys()), maxRecallAttrKeys)
	}
	for i, k := range req.GetAttributeKeys() {
		validText(&v, fmt.Sprintf("attribute_keys[%d]", i), k, maxAttrKeyBytes, true)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	p := recallParams{
		userID: req.GetUserId(), query: req.GetQuery(), limit: int(req.GetLimit()),
		minSimilarity: s.minSimilarity(), maxAge: s.cfg.MaxAge, types: req.GetTypes(),
	}
	if p.limit == 0 {
		p.limit = defaultLimit
	}
	if req.MinSimilarity != nil {
		p.minSimilarity = req.GetMinSimilarity()
	}
	if req.GetMaxAge() != nil {
		p.maxAge = req.GetMaxAge().AsDuration() // 0: no age limit
	}
	for _, k := range req.GetAttributeKeys() {
		p.attributeKeys = append(p.attributeKeys, normalizeAttrKey(k))
	}
	p.occurredAfter, p.occurredBefore, p.refTime = optTime(req.GetOccurredAfter()), optTime(req.GetOccurredBefore()), optTime(req.GetReferenceTime())
	out, err := s.recall(ctx, p)
	if err != nil {
		return nil, err
	}
	applied := p.minSimilarity
	for i, m := range out {
		if i == 0 || m.GetThreshold() < applied {
			applied = m.GetThreshold()
		}
	}
	return &memoryv1.RecallResponse{Memories: out, MinSimilarity: applied, Embedder: s.emb.Name()}, nil
}

// ListMemories implements MemoryService.
func (s *Service) ListMemories(ctx context.Context, req *memoryv1.ListMemoriesRequest) (*memoryv1.ListMemoriesResponse, error) {
	var v rpc.Violations
	validUserID(&v, "user_id", req.GetUserId())
	for i, t := range req.GetTypes() {
		validType(&v, fmt.Sprintf("types[%d]", i), t, true)
	}
	if _, ok := memoryv1.Tier_name[int32(req.GetTier())]; !ok {
		v.Add("tier", "is not a known tier")
	}
	if n := req.GetPageSize(); n < 0 || n > maxPageSize {
		v.Add("page_size", "must be between 1 and %d (0 means %d)", maxPageSize, defaultPageSize)
	}
	cur, err := parsePageToken(req.GetPageToken())
	if err != nil {
		v.Add("page_token", "%v", err)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = defaultPageSize
	}
	page, next, err := s.list(ctx, listParams{
		userID: req.GetUserId(), types: req.GetTypes(), tier: req.GetTier(), includeExpired: req.GetIncludeExpired(),
		pageSize: size, after: cur,
	})
	if err != nil {
		return nil, err
	}
	return &memoryv1.ListMemoriesResponse{Memories: page, NextPageToken: next}, nil
}

// Forget implements MemoryService.
func (s *Service) Forget(ctx context.Context, req *memoryv1.ForgetRequest) (*memoryv1.ForgetResponse, error) {
	var v rpc.Violations
	validUserID(&v, "user_id", req.GetUserId())
	if req.GetMemoryId() == "" {
		v.Add("memory_id", "is required")
	} else if !validID(req.GetMemoryId()) {
		v.Add("memory_id", "is not a memory id (a lower-case UUID)")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if err := s.forget(ctx, req.GetUserId(), req.GetMemoryId()); err != nil {
		return nil, err
	}
	return &memoryv1.ForgetResponse{}, nil
}

// ForgetUser implements MemoryService.
func (s *Service) ForgetUser(ctx context.Context, req *memoryv1.ForgetUserRequest) (*memoryv1.ForgetUserResponse, error) {
	var v rpc.Violations
	validUserID(&v, "user_id", req.GetUserId())
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.forgetUser(ctx, req.GetUserId())
	return resp, err
}

// ExtractTurn implements MemoryService.
func (s *Service) ExtractTurn(ctx context.Context, req *memoryv1.ExtractTurnRequest) (*memoryv1.ExtractTurnResponse, error) {
	var v rpc.Violations
	turn := req.GetTurn()
	if turn == nil {
		v.Add("turn", "is required")
		return nil, v.Err()
	}
	validText(&v, "turn.turn_id", turn.GetTurnId(), maxIDBytes, true)
	validUserID(&v, "turn.user_id", turn.GetUserId())
	validText(&v, "turn.session_id", turn.GetSessionId(), maxIDBytes, false)
	if n := len(turn.GetMessages()); n > maxTurnMessages {
		v.Add("turn.messages", "has %d messages; at most %d are allowed", n, maxTurnMessages)
	}
	total := 0
	for _, m := range turn.GetMessages() {
		total += len(m.GetMessage().GetContent())
	}
	if total > maxTurnTextBytes {
		return nil, errclass.Errorf(errclass.Exhausted, "turn text is %d bytes; at most %d are accepted", total, maxTurnTextBytes)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.extract(ctx, turn)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// RecordBehavior implements MemoryService.
func (s *Service) RecordBehavior(ctx context.Context, req *memoryv1.RecordBehaviorRequest) (*memoryv1.RecordBehaviorResponse, error) {
	var v rpc.Violations
	validUserID(&v, "user_id", req.GetUserId())
	validText(&v, "key", strings.TrimSpace(req.GetKey()), maxBehaviorKey, true)
	validText(&v, "description", req.GetDescription(), maxDescription, false)
	validText(&v, "session_id", req.GetSessionId(), maxIDBytes, false)
	if err := v.Err(); err != nil {
		return nil, err
	}
	resp, err := s.recordBehavior(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// RunMaintenance implements MemoryService.
func (s *Service) RunMaintenance(ctx context.Context, req *memoryv1.RunMaintenanceRequest) (*memoryv1.RunMaintenanceResponse, error) {
	if req.GetUserId() != "" {
		var v rpc.Violations
		validUserID(&v, "user_id", req.GetUserId())
		if err := v.Err(); err != nil {
			return nil, err
		}
	}
	// Maintenance outlives an impatient client: it holds the lock and leaves a consistent
	// state either way, so it runs to the end with its own deadline.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maintenanceLease)
	defer cancel()
	resp, err := s.maintain(mctx, req.GetUserId())
	if err != nil {
		return nil, err
	}
	return resp, nil
}

var _ memoryv1.MemoryServiceServer = (*Service)(nil)
