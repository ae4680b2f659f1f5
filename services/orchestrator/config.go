package orchestrator

import (
	"flag"
	"time"

	"github.com/hermes-agent/hermes/internal/config"
)

// DefaultSystemPrompt is the system prompt when none is configured.
const DefaultSystemPrompt = "You are Hermes, a helpful assistant that gets things done with tools. " +
	"Use a tool when it helps, with arguments that match its schema exactly. " +
	"When a tool result says the arguments were invalid, correct them and call the tool again. " +
	"Never repeat a step the task state lists as done; use its recorded result instead. " +
	"Answer in the user's language."

// Config holds the orchestrator's settings; each is a flag under "orchestrator." with an
// environment variable (HERMES_ORCHESTRATOR_...) and a YAML key.
type Config struct {
	// SystemPrompt opens every model request.
	SystemPrompt string
	// MaxSteps is the default limit of model calls in one turn.
	MaxSteps int
	// TurnTimeout is the default deadline of a turn.
	TurnTimeout time.Duration
	// ModelTimeout bounds one attempt of a model call.
	ModelTimeout time.Duration
	// ModelRetries is the number of retries of a model call on 429, 5xx and connection failures.
	ModelRetries int
	// Stream streams model answers (text deltas reach the client as they arrive).
	Stream bool
	// MaxTools is the most tool schemas sent as they are; with more registered, SelectTools
	// chooses this many for the turn.
	MaxTools int
	// MemoryLimit is the most memories recalled into a turn.
	MemoryLimit int
	// MaxSameFailures ends a turn once the same tool fails the same way this many times in a row.
	MaxSameFailures int
	// MaxCallsPerStep caps the tool calls the model may make in one step.
	MaxCallsPerStep int
	// SummaryModel is the model for summaries; empty uses the turn's model.
	SummaryModel string
	// FillDecisionModel is the model that decides whether a remembered value may fill an
	// argument a call left out ("turn" uses the turn's model, the default); empty or "rules"
	// decides by rules alone. The rules decide whenever the model's answer is unusable or late.
	FillDecisionModel string
	// FillDecisionTimeout bounds one decision request.
	FillDecisionTimeout time.Duration
	// SummaryMaxTokens caps the rolling summary.
	SummaryMaxTokens int
	// SummaryFailures is how many model failures in a row make the summarizer back off to the
	// extractive fallback.
	SummaryFailures int
	// SummaryBackoff is the first back-off; it doubles with each further failure, up to 30 min,
	// spread ±20%.
	SummaryBackoff time.Duration
	// TaskStateSteps is how many done steps the task state keeps.
	TaskStateSteps int
	// TaskStateContextSteps is how many of them go into the context, at most: steps whose call
	// and result the conversation in the context still shows are not repeated there.
	TaskStateContextSteps int
	// TurnRetention is how long finished turn records are kept for GetTurn.
	TurnRetention time.Duration
	// PublishTimeout is how long a turn.finished publish is retried in the background.
	PublishTimeout time.Duration
	// Models are the model names a turn may ask for in its options, besides the configured
	// --model (an operator decision: models differ in cost and in what they may see).
	Models []string
	// MCPInstructions names the MCP servers whose instructions (from their initialize result)
	// are added to the system prompt; "*" is every server. None by default: the text is the
	// server's, not the operator's.
	MCPInstructions []string
	// ImageModels are the models that take image input ("*": every model): images a tool
	// returns (from an MCP server) reach them as image parts of a user message after the tool
	// results; other models read only the tool's text, where each image is described.
	ImageModels []string
	// MaxMessageBytes caps the text of each message in the model's context (the session's log
	// keeps it whole); longer text is cut with a note of what was cut.
	MaxMessageBytes int
	// StepHold is how long a tool step's write waits for the turn's answer, to be stored with
	// it in one write; a next model call that takes longer has the step written while it runs.
	// A crash can lose a finished step within it. Zero is the default (50 ms); a negative value
	// writes each step at once; at most a second.
	StepHold time.Duration
}

// Defaults and limit of Config.StepHold.
const (
	defaultStepHold = 50 * time.Millisecond
	maxStepHold     = time.Second
)

// RegisterFlags registers the settings with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.SystemPrompt, "orchestrator.system-prompt", DefaultSystemPrompt, "system prompt at the start of every model request")
	fs.IntVar(&c.MaxSteps, "orchestrator.max-steps", 10, "default limit of model steps in one turn")
	fs.DurationVar(&c.TurnTimeout, "orchestrator.turn-timeout", 120*time.Second, "default deadline of a turn")
	fs.DurationVar(&c.ModelTimeout, "orchestrator.model-timeout", 60*time.Second, "timeout of one attempt of a model call")
	fs.IntVar(&c.ModelRetries, "orchestrator.model-retries", 2, "retries of a model call on 429, 5xx and connection failures, with exponential backoff")
	fs.BoolVar(&c.Stream, "orchestrator.stream", true, "stream model answers so text deltas reach the client as they arrive")
	fs.IntVar(&c.MaxTools, "orchestrator.max-tools", 20, "most tool schemas sent to the model; with more registered, SelectTools chooses for the turn")
	fs.IntVar(&c.MemoryLimit, "orchestrator.memory-limit", 5, "most memories recalled into a turn")
	fs.IntVar(&c.MaxSameFailures, "orchestrator.max-same-failures", 3, "end a turn once the same tool fails the same way this many times in a row")
	fs.IntVar(&c.MaxCallsPerStep, "orchestrator.max-calls-per-step", 16, "most tool calls the model may make in one step")
	fs.StringVar(&c.SummaryModel, "orchestrator.summary-model", "", "model for rolling summaries; empty uses the turn's model")
	fs.StringVar(&c.FillDecisionModel, "orchestrator.fill-decision-model", "turn", "model that decides whether a remembered value may fill an argument a call left out (\"turn\": the turn's model; \"rules\": the rules alone); an unusable or late answer falls back to the rules, which the model can never overrule towards filling a value the user turned down or replaced")
	fs.DurationVar(&c.FillDecisionTimeout, "orchestrator.fill-decision-timeout", 5*time.Second, "deadline of one fill-decision request; past it the rules decide")
	fs.IntVar(&c.SummaryMaxTokens, "orchestrator.summary-max-tokens", 1200, "token cap of the rolling summary")
	fs.IntVar(&c.SummaryFailures, "orchestrator.summary-failures", 3, "model failures in a row after which summaries back off to the extractive fallback")
	fs.DurationVar(&c.SummaryBackoff, "orchestrator.summary-backoff", time.Minute, "first back-off after repeated summary failures; doubles up to 30m")
	fs.IntVar(&c.TaskStateSteps, "orchestrator.task-state-steps", 200, "done steps kept in a session's task state")
	fs.IntVar(&c.TaskStateContextSteps, "orchestrator.task-state-context-steps", 12, "most done steps shown to the model in the task state (those the window shows are not repeated)")
	fs.DurationVar(&c.TurnRetention, "orchestrator.turn-retention", 7*24*time.Hour, "how long finished turn records are kept for GetTurn")
	fs.DurationVar(&c.PublishTimeout, "orchestrator.publish-timeout", 2*time.Minute, "how long a turn.finished publish is retried in the background")
	fs.Func("orchestrator.models", "comma list of model names a turn may choose in its options besides --model (none by default)", func(v string) error {
		c.Models = config.SplitList(v)
		return nil
	})
	fs.Func("orchestrator.image-models", "comma list of models that take image input (\"*\": every model): images from tools reach them as image parts; others read the images' descriptions (none by default)", func(v string) error {
		c.ImageModels = config.SplitList(v)
		return nil
	})
	fs.Func("orchestrator.mcp-instructions", "comma list of MCP servers whose instructions are added to the system prompt (\"*\": every server; none by default)", func(v string) error {
		c.MCPInstructions = config.SplitList(v)
		return nil
	})
	fs.IntVar(&c.MaxMessageBytes, "orchestrator.max-message-bytes", 64<<10, "most bytes of one message's text in the model's context; longer text is cut with a note (the session keeps it whole)")
	fs.DurationVar(&c.StepHold, "orchestrator.step-hold", defaultStepHold, "how long a tool step's write waits for the turn's answer, to store both in one write (a crash may lose a finished step within it); negative: write each step at once; at most 1s")
}

// withDefaults fills zero values, so a Config built in code works.
func (c Config) withDefaults() Config {
	if c.SystemPrompt == "" {
		c.SystemPrompt = DefaultSystemPrompt
	}
	if c.MaxSteps <= 0 {
		c.MaxSteps = 10
	}
	if c.TurnTimeout <= 0 {
		c.TurnTimeout = 120 * time.Second
	}
	if c.MaxTools <= 0 {
		c.MaxTools = 20
	}
	if c.MemoryLimit <= 0 {
		c.MemoryLimit = 5
	}
	if c.MaxSameFailures <= 0 {
		c.MaxSameFailures = 3
	}
	if c.MaxCallsPerStep <= 0 {
		c.MaxCallsPerStep = 16
	}
	if c.SummaryMaxTokens <= 0 {
		c.SummaryMaxTokens = 1200
	}
	if c.SummaryFailures <= 0 {
		c.SummaryFailures = 3
	}
	if c.SummaryBackoff <= 0 {
		c.SummaryBackoff = time.Minute
	}
	if c.TaskStateSteps <= 0 {
		c.TaskStateSteps = 200
	}
	if c.TaskStateContextSteps <= 0 {
		c.TaskStateContextSteps = 12
	}
	if c.TurnRetention <= 0 {
		c.TurnRetention = 7 * 24 * time.Hour
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 64 << 10
	}
	c.MaxMessageBytes = min(c.MaxMessageBytes, 1<<20)
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 2 * time.Minute
	}
	if c.StepHold == 0 {
		c.StepHold = defaultStepHold
	}
	c.StepHold = min(c.StepHold, maxStepHold)
	return c
}
