package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/backoff"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// call is one ExecuteTool in flight.
type call struct {
	req            *toolsv1.ExecuteToolRequest
	tool           *toolsv1.Tool
	args           []byte // validated (and coerced) arguments
	idempotencyKey string // set for idempotent tools
	attempt        int
	// outputCut: the executor returned a preview cut to a size cap, which the output schema is
	// not checked against; originalBytes is then the whole output's size and cutAt the cap.
	outputCut     bool
	originalBytes int
	cutAt         int
	// outputLimit is the largest output returned whole (outputLimit of the request).
	outputLimit int
	// media is the non-text content of the result, from executors that have any.
	media []*toolsv1.Media
	// deadline is the call's deadline, which the time a person takes to answer a tool's
	// request for input pushes back.
	deadline *callDeadline
}

// executor runs one attempt of a call. It returns the output JSON, an *execError, or the
// context's error when ctx ended.
type executor interface {
	attempt(ctx context.Context, c *call) ([]byte, error)
}

// execError is a failed attempt, classified.
type execError struct {
	code toolsv1.ErrorCode
	// transient failures (network faults, 5xx, 429, gRPC Unavailable) are retried.
	transient bool
	// mayHaveRun: the request reached the tool before the failure, so it may have acted.
	mayHaveRun bool
	// retryAfter is the server's requested pause, if any.
	retryAfter time.Duration
	msg        string
	// authorizationURL: an MCP server with per-user OAuth needs the call's user to connect an
	// account first (ToolError.authorization_url).
	authorizationURL string
}

func (e *execError) Error() string { return e.msg }

// outcome is what the attempts of a call produced.
type outcome struct {
	output     []byte
	err        *execError
	attempts   int
	mayHaveRun bool
	// definitive: the tool answered (success or its own failure), so the answer may be
	// recorded for an idempotency key; timeouts and unreachable tools are not recorded.
	definitive bool
}

// budget is a call's time limits.
type budget struct {
	deadline       time.Time
	timeout        time.Duration // the tool's (or default) timeout
	cappedByCaller bool
	attemptTimeout time.Duration
	maxRetries     int
}

// callBudget computes a call's deadline: the tool's timeout from now, or the caller's deadline
// less a small reserve to send the result back, whichever is sooner.
func (s *Service) callBudget(ctx context.Context, spec *toolsv1.ToolSpec, start time.Time) budget {
	b := budget{timeout: s.cfg.DefaultTimeout, maxRetries: s.cfg.DefaultMaxRetries}
	if spec.GetTimeout() != nil {
		b.timeout = spec.GetTimeout().AsDuration()
	}
	if spec.MaxRetries != nil {
		b.maxRetries = int(spec.GetMaxRetries())
	}
	if spec.GetAttemptTimeout() != nil {
		b.attemptTimeout = spec.GetAttemptTimeout().AsDuration()
	}
	b.deadline = start.Add(b.timeout)
	if dl, ok := ctx.Deadline(); ok {
		reserve := min(100*time.Millisecond, time.Until(dl)/10)
		if d := dl.Add(-reserve); d.Before(b.deadline) {
			b.deadline, b.cappedByCaller = d, true
		}
	}
	return b
}

// run makes the attempts of a call: retries only transient failures, at most maxRetries, with
// exponential backoff and jitter, and never past the deadline. Every attempt runs under a
// context that ends at the deadline, so an executor's request is cancelled, not abandoned.
func (s *Service) run(ctx context.Context, ex executor, c *call, b budget) outcome {
	rctx, dl := newCallDeadline(ctx, b.deadline)
	defer dl.stop()
	c.deadline = dl
	idempotent := c.tool.GetSpec().GetIdempotent()
	var o outcome
	for attempt := 1; ; attempt++ {
		c.attempt = attempt
		o.attempts = attempt
		actx, acancel := rctx, context.CancelFunc(func() {})
		if b.attemptTimeout > 0 && dl.until() > b.attemptTimeout {
			actx, acancel = context.WithTimeout(rctx, b.attemptTimeout)
		}
		actx, aspan := s.tracer.Start(actx, "tools.attempt", trace.WithAttributes(attribute.Int("tool.attempt", attempt)))
		out, err := ex.attempt(actx, c)
		if err != nil {
			aspan.SetStatus(codes.Error, err.Error())
		}
		aspan.End()
		attemptTimedOut := errors.Is(actx.Err(), context.DeadlineExceeded) && rctx.Err() == nil
		acancel()
		if err == nil {
			o.output, o.definitive = out, true
			return o
		}
		var ee *execError
		isTimeout := errors.As(err, &ee) && ee.code == toolsv1.ErrorCode_ERROR_CODE_TIMEOUT
		switch {
		// A remote deadline (gRPC's grpc-timeout) can fire a moment before ours: a timeout
		// reported at the deadline is the call's timeout.
		case rctx.Err() != nil || (isTimeout && dl.until() < 50*time.Millisecond):
			o.err = s.timeoutError(c, b, attempt, errors.Is(ctx.Err(), context.Canceled))
			return o
		case attemptTimedOut:
			ee = &execError{code: toolsv1.ErrorCode_ERROR_CODE_TIMEOUT, transient: true, mayHaveRun: true,
				msg: fmt.Sprintf("attempt %d did not finish within the attempt timeout of %s", attempt, b.attemptTimeout)}
		case errors.As(err, &ee):
		default:
			ee = &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: err.Error()}
		}
		if !ee.transient {
			// A call refused until the user connects an account is not the tool's answer: it is
			// not recorded for an idempotency key, so the same call works once they have.
			o.err, o.definitive = ee, ee.code == toolsv1.ErrorCode_ERROR_CODE_EXECUTION && ee.authorizationURL == ""
			o.mayHaveRun = o.mayHaveRun || (ee.mayHaveRun && !idempotent)
			return o
		}
		if attempt > b.maxRetries {
			o.err = withAttempts(ee, attempt)
			return o
		}
		delay := s.backoff(attempt)
		if ee.retryAfter > delay {
			delay = ee.retryAfter
		}
		if dl.until() <= delay {
			o.err = withAttempts(ee, attempt)
			o.err.msg += fmt.Sprintf("; no time was left for another attempt within the timeout of %s", b.timeout)
			return o
		}
		if ee.mayHaveRun && !idempotent {
			o.mayHaveRun = true
		}
		if !backoff.Sleep(rctx, delay) {
			o.err = s.timeoutError(c, b, attempt, errors.Is(ctx.Err(), context.Canceled))
			return o
		}
	}
}

func withAttempts(ee *execError, attempts int) *execError {
	out := *ee
	if attempts > 1 {
		out.msg = fmt.Sprintf("%s (%d attempts)", ee.msg, attempts)
	}
	return &out
}

// backoff is the pause before retry n (1-based): base·2^(n-1) capped, spread ±20% so replicas
// retrying together do not retry in step.
func (s *Service) backoff(n int) time.Duration {
	return backoff.Policy{Initial: s.cfg.RetryBackoff, Max: s.cfg.RetryMaxBackoff, Jitter: 0.2}.Delay(n - 1)
}

func (s *Service) timeoutError(c *call, b budget, attempts int, callerGone bool) *execError {
	name := c.tool.GetSpec().GetName()
	if callerGone {
		return &execError{code: toolsv1.ErrorCode_ERROR_CODE_TIMEOUT, msg: fmt.Sprintf("the call of %s was cancelled by the caller", name)}
	}
	limit := fmt.Sprintf("its timeout of %s", b.timeout)
	if b.cappedByCaller {
		limit = "the caller's deadline"
	}
	msg := fmt.Sprintf("The tool %s did not finish within %s and was cancelled (%d %s).", name, limit, attempts, plural(attempts, "attempt", "attempts"))
	if !c.tool.GetSpec().GetIdempotent() {
		msg += " It may have acted before it was cancelled: check its effect before calling it again."
	} else {
		msg += " You can call it again, or continue without its result."
	}
	return &execError{code: toolsv1.ErrorCode_ERROR_CODE_TIMEOUT, msg: msg}
}

// execute is ExecuteTool after request validation. It returns a gRPC error only when the
// service itself cannot work (its store is down); every failure of the call is a result.
func (s *Service) execute(ctx context.Context, req *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
	ctx, span := s.tracer.Start(ctx, "tools.execute "+req.GetName(), trace.WithAttributes(
		attribute.String("tool.name", req.GetName()), attribute.String("tool.call_id", req.GetCallId())))
	defer span.End()
	start := time.Now()
	res, err := s.executeAt(ctx, req, start)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	if res != nil {
		res.Duration = durationpb.New(time.Since(start))
	}
	// hermes serve records a span only under a caller's sampled trace (or with an exporter):
	// the attributes of a span no one records are not built (five allocations a call).
	if res != nil && span.IsRecording() {
		span.SetAttributes(
			attribute.Bool("tool.success", res.GetSuccess()),
			attribute.String("tool.error_code", res.GetError().GetCode().String()),
			attribute.Int("tool.attempts", int(res.GetAttempts())),
			attribute.Bool("tool.replayed", res.GetReplayed()),
			attribute.Int64("tool.version", res.GetToolVersion()),
		)
	}
	return res, err
}

func (s *Service) executeAt(ctx context.Context, req *toolsv1.ExecuteToolRequest, start time.Time) (*toolsv1.ToolResult, error) {
	st, cs, err := s.reg.Get(ctx, req.GetName())
	if errors.Is(err, ErrNotFound) {
		return s.unknownTool(ctx, req.GetName())
	}
	if err != nil {
		return nil, fmt.Errorf("read the tool registry: %w", err)
	}
	tool := st.Tool
	spec := tool.GetSpec()
	res := &toolsv1.ToolResult{ToolVersion: tool.GetVersion()}

	if len(req.GetArguments()) > s.cfg.MaxArgumentBytes {
		return failure(res, toolsv1.ErrorCode_ERROR_CODE_VALIDATION, fmt.Sprintf(
			"The arguments for tool %s are %d bytes; at most %d are accepted. Send shorter arguments and call %s again.",
			spec.GetName(), len(req.GetArguments()), s.cfg.MaxArgumentBytes, spec.GetName())), nil
	}
	args, coercions, violations, perr := checkArguments(cs.input, req.GetArguments())
	res.Coercions = coercions
	if perr != nil {
		return failure(res, toolsv1.ErrorCode_ERROR_CODE_INVALID_JSON, fmt.Sprintf(
			"The arguments for tool %s are not valid JSON: %s. Send the arguments as one complete JSON object matching the tool's input schema and call %s again.",
			spec.GetName(), perr.Error(), spec.GetName())), nil
	}
	if len(violations) > 0 {
		failure(res, toolsv1.ErrorCode_ERROR_CODE_VALIDATION, validationMessage(spec.GetName(), violations))
		res.Error.Violations = violations
		return res, nil
	}

	b := s.callBudget(ctx, spec, start)
	c := &call{req: req, tool: tool, args: args, outputLimit: s.outputLimit(req)}
	var key, owner string
	// A pure builtin's repeated call gives the same result: it is run again, not recorded.
	if spec.GetIdempotent() && req.GetIdempotencyKey() != "" && !s.builtins.pure(spec) {
		c.idempotencyKey = req.GetIdempotencyKey()
		key = idempotencyRecordKey(spec.GetName(), req.GetUserId(), req.GetIdempotencyKey())
		wctx, cancel := context.WithDeadline(ctx, b.deadline)
		var claim *Claim
		hash := argsHash(args)
		owner, claim, err = s.idem.claim(wctx, key, hash)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			return failure(res, toolsv1.ErrorCode_ERROR_CODE_TIMEOUT, fmt.Sprintf(
				"Another call of %s with the same idempotency key is still running and did not finish within %s. Call again with the same key to get its result once it finishes.",
				spec.GetName(), b.timeout)), nil
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, fmt.Errorf("use the idempotency store: %w", err)
		case claim.ArgsHash != hash:
			return failure(res, toolsv1.ErrorCode_ERROR_CODE_VALIDATION, fmt.Sprintf(
				"The idempotency key %q was already used for a call of %s with different arguments. Use a new key for a different call, or repeat the original arguments.",
				truncateRunes(req.GetIdempotencyKey(), 80), spec.GetName())), nil
		case claim.State == CallDone:
			return replayed(claim.Result)
		}
	}

	o := s.run(ctx, s.executorFor(spec), c, b)
	res.Attempts = int32(o.attempts)
	res.MayHaveRun = o.mayHaveRun
	if o.err != nil {
		failure(res, o.err.code, o.err.msg)
		res.Error.AuthorizationUrl = o.err.authorizationURL
	} else {
		s.finishOutput(res, cs, spec.GetName(), o.output, c)
		if res.GetSuccess() {
			res.Media = c.media
		}
	}
	if owner != "" {
		s.idem.finish(key, owner, res, o.definitive)
	}
	return res, nil
}

// outputLimit is the largest output returned whole for req: the service's limit, or the
// caller's max_output_bytes up to the largest webhook response the service reads.
func (s *Service) outputLimit(req *toolsv1.ExecuteToolRequest) int {
	if n := int(req.GetMaxOutputBytes()); n > 0 {
		return min(n, max(s.cfg.MaxResponseBytes, s.cfg.MaxOutputBytes))
	}
	return s.cfg.MaxOutputBytes
}

// finishOutput checks the output against the output schema (unless it is already a cut
// preview) and cuts it to the call's output limit. output_bytes and the note of a preview give
// the size of the whole output, also when the executor had already cut it.
func (s *Service) finishOutput(res *toolsv1.ToolResult, cs *compiledSpec, name string, out []byte, c *call) {
	if cs.output != nil && !c.outputCut {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(out)))
		if err == nil {
			err = cs.output.root.Validate(inst)
		}
		if err != nil {
			var parts []string
			for _, v := range cs.output.violations(err, inst) {
				parts = append(parts, fmt.Sprintf("%s: %s", orRoot(v.Pointer), v.Message))
			}
			failure(res, toolsv1.ErrorCode_ERROR_CODE_EXECUTION, fmt.Sprintf(
				"The tool %s returned output that does not match its output schema (%s); its result cannot be used. Retrying will not help unless the tool is fixed.",
				name, truncateRunes(strings.Join(parts, "; "), 1000)))
			return
		}
	}
	res.Success = true
	res.OutputBytes = int64(len(out))
	original := 0
	if c.outputCut && c.originalBytes > 0 {
		// out is the executor's preview (JSON-encoded, so possibly longer than what it shows):
		// the size that matters is the whole output's.
		original = c.originalBytes
		res.OutputBytes, res.OutputLimitBytes = int64(original), int64(c.cutAt)
	}
	var cutHere bool
	res.Output, cutHere = truncateOutput(out, c.outputLimit, original)
	if cutHere {
		res.OutputLimitBytes = int64(c.outputLimit)
	}
	res.Truncated = cutHere || c.outputCut
}

func orRoot(p string) string {
	if p == "" {
		return "(the whole output)"
	}
	return p
}

// truncateOutput cuts output longer than max bytes to a preview: a JSON string holding the
// start of the output (the text itself when the output is a string) and a note saying how
// much was cut. original, when not 0, is the size of the whole output that an executor
// already cut to out.
func truncateOutput(out []byte, maxBytes, original int) (string, bool) {
	if len(out) <= maxBytes {
		return string(out), false
	}
	text := string(out)
	var s string
	if len(out) > 0 && out[0] == '"' && json.Unmarshal(out, &s) == nil {
		text = s
	}
	keep := max(maxBytes-160, maxBytes/2)
	for {
		cut := min(keep, len(text))
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		preview := text[:cut]
		whole := max(original, len(text))
		note := fmt.Sprintf("\n[output truncated: showing the first %d of %d bytes; %d bytes were cut by the %d-byte cap]", len(preview), whole, whole-len(preview), maxBytes)
		b, _ := json.Marshal(preview + note)
		if len(b) <= maxBytes || keep <= 0 {
			return string(b), true
		}
		keep -= len(b) - maxBytes
	}
}

func failure(res *toolsv1.ToolResult, code toolsv1.ErrorCode, msg string) *toolsv1.ToolResult {
	res.Success = false
	res.Error = &toolsv1.ToolError{Code: code, Message: msg}
	return res
}

func replayed(stored []byte) (*toolsv1.ToolResult, error) {
	res := &toolsv1.ToolResult{}
	if err := proto.Unmarshal(stored, res); err != nil {
		return nil, fmt.Errorf("corrupt idempotency record: %w", err)
	}
	res.Replayed = true
	res.Attempts = 0
	res.MayHaveRun = false
	return res, nil
}

// checkArguments parses, coerces and validates arguments. It returns the arguments to send
// (the original text when nothing was coerced), the coercions, and either a parse error or the
// violations.
func checkArguments(cs *compiledSchema, text string) ([]byte, []*toolsv1.Coercion, []*toolsv1.Violation, error) {
	inst, err := parseArguments(text)
	if err != nil {
		return nil, nil, nil, err
	}
	var coercions []*toolsv1.Coercion
	inst = cs.coerce(cs.root, inst, "", &coercions)
	sort.Slice(coercions, func(i, j int) bool { return coercions[i].Pointer < coercions[j].Pointer })
	if err := cs.root.Validate(inst); err != nil {
		return nil, coercions, cs.violations(err, inst), nil
	}
	var args []byte
	if len(coercions) == 0 && strings.TrimSpace(text) != "" {
		return []byte(strings.TrimSpace(text)), nil, nil, nil
	}
	args, err = json.Marshal(inst)
	if err != nil {
		return nil, coercions, nil, err
	}
	return args, coercions, nil, nil
}

// argsHash identifies arguments for an idempotency key: the same key with other arguments is a
// mistake the caller must hear about.
func argsHash(args []byte) string {
	canon := args
	if v, err := parseArguments(string(args)); err == nil {
		canon, _ = json.Marshal(v) // sorted keys, numbers as written
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:16])
}

// idempotencyRecordKey scopes a key to its tool and the user the call runs for, and bounds its
// length: one user's recorded result (perhaps from that user's own account of a per-user OAuth
// server) is never replayed to another who happens to use the same key. A call for no user
// keeps the key it always had.
func idempotencyRecordKey(tool, user, key string) string {
	scoped := tool + "\x00" + key
	if user != "" {
		scoped += "\x00" + user
	}
	sum := sha256.Sum256([]byte(scoped))
	return tool + ":" + hex.EncodeToString(sum[:])
}

func (s *Service) executorFor(spec *toolsv1.ToolSpec) executor {
	switch spec.GetExecutor().(type) {
	case *toolsv1.ToolSpec_Http:
		return s.httpExec
	case *toolsv1.ToolSpec_Mcp:
		return s.mcpExec
	case *toolsv1.ToolSpec_Builtin:
		return s.builtinExec
	}
	return noExecutor{}
}

type noExecutor struct{}

func (noExecutor) attempt(context.Context, *call) ([]byte, error) {
	return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, msg: "the tool has no executor"}
}
