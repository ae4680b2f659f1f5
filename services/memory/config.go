package memory

import (
	"flag"
	"time"
)

// Config holds the memory service's settings; each is a flag under "memory." with an environment
// variable (HERMES_MEMORY_...) and a YAML key (memory: {...}).
type Config struct {
	// ExplicitEnabled switches explicit extraction by a model after each turn (on by default).
	ExplicitEnabled bool
	// ExplicitWeight multiplies the recall score of explicitly extracted memories.
	ExplicitWeight float64
	// ImplicitEnabled switches implicit accumulation of behaviour counts (off by default).
	ImplicitEnabled bool
	// ImplicitWeight multiplies the recall score of habit memories from behaviour counts.
	ImplicitWeight float64
	// MinConfidence is the lowest model confidence an extracted memory is kept with.
	MinConfidence float64
	// SemanticMinConfidence is the lowest confidence that sends a preference, fact, config or
	// habit straight to the semantic tier; lower ones start episodic.
	SemanticMinConfidence float64
	// RequirePreferenceCue drops an extracted preference when the user's words carry no
	// preference cue ("喜欢", "prefer", "always" …): a place mentioned once is not a preference.
	RequirePreferenceCue bool
	// ExtractPrefilter skips the extraction model call for a turn whose user words state nothing
	// about the user (only requests, questions, small talk): see prefilter.go.
	ExtractPrefilter bool
	// ExtractAttempts is how many model calls one extraction makes when replies are not JSON.
	ExtractAttempts int
	// ExtractTimeout bounds one model call.
	ExtractTimeout time.Duration
	// ExtractMaxInputBytes caps the turn text sent to the model.
	ExtractMaxInputBytes int

	// MinSimilarity is the recall threshold for a model embedder (the article's 0.45).
	MinSimilarity float64
	// LexicalMinSimilarity is the recall threshold of the lexical (BM25) score: about the IDF of
	// one shared word, ln(memories / memories with it); 1.0 leaves out memories that share only
	// words that a third or more of the user's memories have (a name, "today"). It is capped for
	// users with very few memories (lexicalFloor).
	LexicalMinSimilarity float64
	// LexicalRelativeSimilarity is no longer used (BM25 scores need no relative cut); the flag
	// is kept so configurations that set it still load.
	LexicalRelativeSimilarity float64
	// ContextWeight is the fraction of the similarity of the memory a memory directly follows in
	// its conversation that it adds to its own (see contextBoost): to rank, and with the lexical
	// embedder to pass the threshold, though only a memory sharing a word with the query can.
	// 0 turns it off.
	ContextWeight float64
	// TimeBoost multiplies the score of a memory that happened in the time a query names
	// ("yesterday", "上周", "in May 2023") by 1 + TimeBoost.
	TimeBoost float64
	// DuplicateSimilarity is the similarity at or above which a new memory of the same type
	// updates an existing one instead of adding a copy (model embedder).
	DuplicateSimilarity float64
	// LexicalDuplicateSimilarity is DuplicateSimilarity for the lexical embedder.
	LexicalDuplicateSimilarity float64
	// MaxAge leaves memories not updated within it out of recall, except facts.
	MaxAge time.Duration
	// RecencyWeight is how much recency reorders memories that passed the threshold (0..1).
	RecencyWeight float64
	// RecencyHalfLife is the age at which the recency factor halves.
	RecencyHalfLife time.Duration

	// EpisodicTTL is how long an episodic memory lives after its last write or recall.
	EpisodicTTL time.Duration
	// PromoteAfterRecalls promotes an episodic memory to semantic once recalled this often.
	PromoteAfterRecalls int
	// DemoteAfter demotes a semantic memory not recalled (nor updated) for this long.
	DemoteAfter time.Duration
	// DeleteAfter deletes an episodic memory not recalled (nor updated) for this long.
	DeleteAfter time.Duration
	// ExpiredRetention is how long superseded memories are kept before they are purged.
	ExpiredRetention time.Duration
	// MaintenanceInterval is how often the periodic maintenance job runs; 0 disables it.
	MaintenanceInterval time.Duration
	// MergeSimilarity is the similarity at or above which maintenance merges two memories.
	MergeSimilarity float64

	// BehaviorWindow is the sliding window behaviour counts are kept in.
	BehaviorWindow time.Duration
	// HabitThreshold: a habit memory is written once a count passes it.
	HabitThreshold int

	// ExtractionRecordTTL is how long a processed turn is remembered, for idempotency; it must
	// outlive the stream's retention so a redelivered turn is never processed twice.
	ExtractionRecordTTL time.Duration
	// ConsumerEnabled starts the NATS consumer of turn.finished.
	ConsumerEnabled bool
	// ConsumerWorkers is how many turns one replica extracts at once.
	ConsumerWorkers int
	// ConsumerAckWait is how long JetStream waits for an ack before redelivering.
	ConsumerAckWait time.Duration
	// ConsumerMaxDeliver bounds deliveries of one event; the last failure dead-letters it.
	ConsumerMaxDeliver int
	// ConsumerRetryBackoff is the delay before the first redelivery of a failed event; it
	// doubles per delivery up to ten minutes.
	ConsumerRetryBackoff time.Duration

	// QdrantCollection is the Qdrant collection of the semantic tier.
	QdrantCollection string
	// EmbedDimensions is the vector size of the model embedder; 0 asks the endpoint once.
	EmbedDimensions int
	// LexicalDimensions is no longer used (kept so configurations that set it still load).
	LexicalDimensions int
}

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.ExplicitEnabled, "memory.explicit-enabled", true, "extract memories from finished turns with a model")
	fs.Float64Var(&c.ExplicitWeight, "memory.explicit-weight", 1.0, "recall score weight of explicitly extracted memories")
	fs.BoolVar(&c.ImplicitEnabled, "memory.implicit-enabled", false, "count behaviour (RecordBehavior) and write habit memories")
	fs.Float64Var(&c.ImplicitWeight, "memory.implicit-weight", 0.8, "recall score weight of habit memories from behaviour counts")
	fs.Float64Var(&c.MinConfidence, "memory.min-confidence", 0.8, "lowest model confidence an extracted memory is kept with")
	fs.Float64Var(&c.SemanticMinConfidence, "memory.semantic-min-confidence", 0.9, "lowest confidence that sends a preference, fact, config or habit straight to the semantic tier")
	fs.BoolVar(&c.RequirePreferenceCue, "memory.require-preference-cue", true, "drop an extracted preference when the user's words carry no preference cue")
	fs.BoolVar(&c.ExtractPrefilter, "memory.extract-prefilter", true, "skip the extraction model call for a turn whose user words state nothing about the user (only requests, questions, small talk; rules and words in internal/textseg/lexicon); when unsure it extracts")
	fs.IntVar(&c.ExtractAttempts, "memory.extract-attempts", 2, "model calls per extraction when the reply is not valid JSON")
	fs.DurationVar(&c.ExtractTimeout, "memory.extract-timeout", 30*time.Second, "timeout of one extraction model call")
	fs.IntVar(&c.ExtractMaxInputBytes, "memory.extract-max-input-bytes", 16000, "cap on the turn text sent to the extraction model")

	fs.Float64Var(&c.MinSimilarity, "memory.min-similarity", 0.45, "recall similarity threshold with a model embedder")
	fs.Float64Var(&c.LexicalMinSimilarity, "memory.lexical-min-similarity", 1.0, "recall threshold of the lexical BM25 score: about the IDF of one shared word, ln(memories/those with it), so 1.0 leaves out memories that share only words about a third or more of the memories have; capped at 0.85 x the IDF of a word one memory has, for users with very few (calibrated, see bench/README.md)")
	fs.Float64Var(&c.LexicalRelativeSimilarity, "memory.lexical-relative-similarity", 0, "unused (kept so configurations that set it still load)")
	fs.Float64Var(&c.ContextWeight, "memory.context-weight", 0.4, "fraction of the BM25 score of the memory a memory directly follows in its conversation that it adds to its own, to rank and, with the lexical embedder, to pass the threshold (it must still share a word with the query); 0 turns it off")
	fs.Float64Var(&c.TimeBoost, "memory.time-boost", 0.5, "a memory that happened in the time a query names scores x(1 + this)")
	fs.Float64Var(&c.DuplicateSimilarity, "memory.duplicate-similarity", 0.92, "similarity at which a new memory updates an existing one of the same type (model embedder)")
	fs.Float64Var(&c.LexicalDuplicateSimilarity, "memory.lexical-duplicate-similarity", 0.85, "duplicate similarity with the lexical hashing embedder")
	fs.DurationVar(&c.MaxAge, "memory.max-age", 30*24*time.Hour, "memories not updated within this age are not recalled, except facts")
	fs.Float64Var(&c.RecencyWeight, "memory.recency-weight", 0.2, "how much recency reorders memories that passed the threshold (0..1)")
	fs.DurationVar(&c.RecencyHalfLife, "memory.recency-half-life", 14*24*time.Hour, "age at which the recency factor halves")

	fs.DurationVar(&c.EpisodicTTL, "memory.episodic-ttl", 72*time.Hour, "lifetime of an episodic memory after its last write or recall")
	fs.IntVar(&c.PromoteAfterRecalls, "memory.promote-after-recalls", 3, "promote an episodic memory to semantic once recalled this often")
	fs.DurationVar(&c.DemoteAfter, "memory.demote-after", 60*24*time.Hour, "demote a semantic memory not recalled or updated for this long to episodic")
	fs.DurationVar(&c.DeleteAfter, "memory.delete-after", 7*24*time.Hour, "delete an episodic memory not recalled or updated for this long")
	fs.DurationVar(&c.ExpiredRetention, "memory.expired-retention", 30*24*time.Hour, "how long superseded memories are kept before they are purged")
	fs.DurationVar(&c.MaintenanceInterval, "memory.maintenance-interval", time.Hour, "how often maintenance runs (one replica at a time); 0 disables it")
	fs.Float64Var(&c.MergeSimilarity, "memory.merge-similarity", 0.9, "similarity at which maintenance merges two memories of the same type")

	fs.DurationVar(&c.BehaviorWindow, "memory.behavior-window", 30*24*time.Hour, "sliding window of behaviour counts")
	fs.IntVar(&c.HabitThreshold, "memory.habit-threshold", 3, "a habit memory is written once a behaviour count passes this")

	fs.DurationVar(&c.ExtractionRecordTTL, "memory.extraction-record-ttl", 14*24*time.Hour, "how long a processed turn id is remembered (longer than the stream's 7-day retention)")
	fs.BoolVar(&c.ConsumerEnabled, "memory.consumer-enabled", true, "consume turn.finished events from NATS JetStream")
	fs.IntVar(&c.ConsumerWorkers, "memory.consumer-workers", 2, "turns one replica extracts at once")
	fs.DurationVar(&c.ConsumerAckWait, "memory.consumer-ack-wait", 60*time.Second, "JetStream ack wait before a turn is redelivered")
	fs.IntVar(&c.ConsumerMaxDeliver, "memory.consumer-max-deliver", 10, "deliveries of one turn before it is dead-lettered")
	fs.DurationVar(&c.ConsumerRetryBackoff, "memory.consumer-retry-backoff", 2*time.Second, "delay before a failed turn is redelivered; doubles per delivery up to 10m (10 deliveries span about 17 minutes)")

	fs.StringVar(&c.QdrantCollection, "memory.qdrant-collection", "hermes_memories", "Qdrant collection of the semantic tier")
	fs.IntVar(&c.EmbedDimensions, "memory.embed-dimensions", 0, "vector size of the model embedder; 0 asks the endpoint once at start-up")
	fs.IntVar(&c.LexicalDimensions, "memory.lexical-dimensions", 4096, "unused (the lexical index is per term now; kept so configurations that set it still load)")
}

// DefaultConfig returns the defaults RegisterFlags sets, for tests and embedding.
func DefaultConfig() Config {
	var c Config
	fs := flag.NewFlagSet("memory", flag.ContinueOnError)
	c.RegisterFlags(fs)
	return c
}
