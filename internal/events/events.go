// Package events carries Hermes' events over NATS JetStream: the HERMES_EVENTS stream, the
// turn.finished subject, publishing with de-duplication, and an embedded NATS server for
// monolithic mode.
package events

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/backoff"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
)

// Names are the stream, subject and consumer names. DefaultNames are fixed by the design; a
// namespace gives a separate set on a shared NATS server (tests running side by side, or
// several Hermes installations on one cluster).
type Names struct {
	// Stream is the JetStream stream, HERMES_EVENTS.
	Stream string
	// TurnFinishedPrefix is "hermes.turn.finished."; the user token follows.
	TurnFinishedPrefix string
	// DeadLetterPrefix is "hermes.dlq."; the original subject follows.
	DeadLetterPrefix string
	// ExtractorConsumer is the durable consumer of the memory extractor, "memory-extractor".
	ExtractorConsumer string
	// ElicitationPrefix is "hermes.mcp.elicitation" (core NATS, not a stream): an answer to an
	// MCP server's request for user input goes to <prefix>.<id>, where the replica holding the
	// request listens.
	ElicitationPrefix string
	// AccountConnected is "hermes.mcp.account_connected" (core NATS): a gateway replica that
	// stored a user's connection to an MCP server says so here, and every replica's MCP endpoint
	// tells the sessions it sent that user's link (notifications/elicitation/complete).
	AccountConnected string
}

// DefaultNames returns the design's names.
func DefaultNames() Names {
	return Names{
		Stream:             "HERMES_EVENTS",
		TurnFinishedPrefix: "hermes.turn.finished.",
		DeadLetterPrefix:   "hermes.dlq.",
		ExtractorConsumer:  "memory-extractor",
		ElicitationPrefix:  "hermes.mcp.elicitation",
		AccountConnected:   "hermes.mcp.account_connected",
	}
}

// NamespacedNames returns DefaultNames for an empty namespace, else names with the namespace
// in them: stream HERMES_EVENTS_<NS>, subjects <ns>.hermes.turn.finished.<user> and
// <ns>.hermes.dlq.>.
func NamespacedNames(namespace string) Names {
	n := DefaultNames()
	if namespace == "" {
		return n
	}
	tok := userToken(namespace)
	n.Stream += "_" + strings.ToUpper(strings.ReplaceAll(tok, "-", "_"))
	n.TurnFinishedPrefix = tok + "." + n.TurnFinishedPrefix
	n.DeadLetterPrefix = tok + "." + n.DeadLetterPrefix
	n.ElicitationPrefix = tok + "." + n.ElicitationPrefix
	n.AccountConnected = tok + "." + n.AccountConnected
	return n
}

var subjectToken = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// userToken is the subject token for a user id. Ids that are not a plain token (they contain
// '.', '*', '>', spaces or are long) are encoded as "b64_" plus unpadded base64url, so every user
// maps to exactly one subject token.
func userToken(userID string) string {
	if subjectToken.MatchString(userID) && !hasB64Prefix(userID) {
		return userID
	}
	return "b64_" + base64.RawURLEncoding.EncodeToString([]byte(userID))
}

func hasB64Prefix(s string) bool { return len(s) >= 4 && s[:4] == "b64_" }

// TurnFinishedSubject is hermes.turn.finished.<user>.
func (n Names) TurnFinishedSubject(userID string) string {
	return n.TurnFinishedPrefix + userToken(userID)
}

// TurnFinishedFilter matches every user's turn.finished subject.
func (n Names) TurnFinishedFilter() string { return n.TurnFinishedPrefix + ">" }

// DeadLetterSubject is where a poison message of the given original subject goes.
func (n Names) DeadLetterSubject(original string) string { return n.DeadLetterPrefix + original }

// DeadLetterFilter matches every dead letter.
func (n Names) DeadLetterFilter() string { return n.DeadLetterPrefix + ">" }

// Connect dials NATS with reconnects that never give up, so a restarted NATS server is picked
// up again, and returns the connection with its JetStream context. extra options come last
// (Embedded.InProcess).
func Connect(url, name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	if log == nil {
		log = slog.Default()
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "error", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", redactURL(c.ConnectedUrl())) }),
	}
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", redactURL(url), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// EnsureStream creates or updates the HERMES_EVENTS stream with one copy. Messages are kept for 7 days and
// de-duplicated by Nats-Msg-Id within 10 minutes, so a retried publish of one turn is stored once.
func EnsureStream(ctx context.Context, js jetstream.JetStream, n Names) (jetstream.Stream, error) {
	return EnsureStreamReplicas(ctx, js, n, 1)
}

// EnsureStreamReplicas is EnsureStream with the number of copies a NATS cluster keeps (1 for a
// single server, 3 for a production cluster).
//
// A stream that already has the settings Hermes relies on is left alone: replicas starting
// together then send no update at all (concurrent updates of one stream are a known crash of
// older NATS servers), and settings an operator added (a byte limit, placement) survive a
// restart. A stream that differs in one of them is updated to Hermes' values.
func EnsureStreamReplicas(ctx context.Context, js jetstream.JetStream, n Names, replicas int) (jetstream.Stream, error) {
	want := streamConfig(n, replicas)
	var st jetstream.Stream
	err := RetryStartup(ctx, func() error {
		var err error
		st, err = js.Stream(ctx, n.Stream)
		switch {
		case err == nil && streamSettled(st.CachedInfo().Config, want):
			return nil
		case err == nil, errors.Is(err, jetstream.ErrStreamNotFound):
			st, err = js.CreateOrUpdateStream(ctx, want)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", n.Stream, err)
	}
	return st, nil
}

// streamConfig is the configuration of the events stream.
func streamConfig(n Names, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Replicas:    max(replicas, 1),
		Name:        n.Stream,
		Description: "Hermes events: turn.finished for the memory extractor, and dead letters",
		Subjects:    []string{n.TurnFinishedFilter(), n.DeadLetterFilter()},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      7 * 24 * time.Hour,
		Duplicates:  10 * time.Minute,
	}
}

// streamSettled reports whether have has every setting of want that Hermes depends on: the
// subjects it publishes to, the copies, storage, retention, age and de-duplication window.
func streamSettled(have, want jetstream.StreamConfig) bool {
	subjects := slices.Clone(have.Subjects)
	slices.Sort(subjects)
	wantSubjects := slices.Clone(want.Subjects)
	slices.Sort(wantSubjects)
	return slices.Equal(subjects, wantSubjects) &&
		have.Replicas == want.Replicas &&
		have.Storage == want.Storage &&
		have.Retention == want.Retention &&
		have.MaxAge == want.MaxAge &&
		have.Duplicates == want.Duplicates
}

// startupRetry paces RetryStartup.
var startupRetry = backoff.Policy{Initial: 20 * time.Millisecond, Max: time.Second, Jitter: 0.2}

// RetryStartup runs op, a JetStream call a process makes as it starts (creating or updating
// the stream, a durable consumer), again while the server answers it with an error status of
// 500 or more, until ctx ends. Replicas that start together race on the stream: while one
// creates or updates it, another's consumer creation can fail with "invalid stream" (500,
// error code 10012), and the replica would exit. Any other error is returned at once.
func RetryStartup(ctx context.Context, op func() error) error {
	var err error
	backoff.Until(ctx, startupRetry, func() bool {
		err = op()
		var apiErr *jetstream.APIError
		return err == nil || !errors.As(err, &apiErr) || apiErr.Code < 500
	})
	return err
}

// turnFinishedContentType is the Content-Type header of a published turn.finished: binary
// protobuf of hermes.events.v1.TurnFinished.
const turnFinishedContentType = "application/x-protobuf; messageType=hermes.events.v1.TurnFinished"

// MarshalTurnFinished encodes the event as binary protobuf. Decoding protobuf JSON cost the
// extractor 8% of its CPU, and encoding it 2% of the orchestrator's.
func MarshalTurnFinished(ev *eventsv1.TurnFinished) ([]byte, error) {
	return proto.Marshal(ev)
}

// UnmarshalTurnFinished decodes an event, binary protobuf or the protobuf JSON that earlier
// releases published (still in a stream after an upgrade), tolerating fields added by newer
// publishers. The two cannot be confused: JSON starts with '{', which in binary protobuf would be
// a deprecated group tag no encoder writes.
func UnmarshalTurnFinished(data []byte) (*eventsv1.TurnFinished, error) {
	ev := &eventsv1.TurnFinished{}
	var err error
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, ev)
	} else {
		err = proto.Unmarshal(data, ev)
	}
	if err != nil {
		return nil, fmt.Errorf("decode turn.finished: %w", err)
	}
	if ev.GetTurnId() == "" || ev.GetUserId() == "" {
		return nil, errors.New("decode turn.finished: turn_id and user_id are required")
	}
	return ev, nil
}

// PublishOption changes how PublishTurnFinished publishes.
type PublishOption func(*publishOptions)

type publishOptions struct {
	keys *Keyring
	data []byte
}

// SignWith signs the event with the keyring's first key (the extractor refuses unsigned events).
func SignWith(k *Keyring) PublishOption { return func(o *publishOptions) { o.keys = k } }

// Encoded publishes data, the event's encoding by MarshalTurnFinished made before (a turn's
// outbox entry), instead of encoding the event again.
func Encoded(data []byte) PublishOption { return func(o *publishOptions) { o.data = data } }

// PublishTurnFinished publishes the event with the turn id as Nats-Msg-Id, retrying with
// backoff until ctx ends; JetStream de-duplication makes the retries safe.
func PublishTurnFinished(ctx context.Context, js jetstream.JetStream, n Names, ev *eventsv1.TurnFinished, opts ...PublishOption) error {
	var o publishOptions
	for _, opt := range opts {
		opt(&o)
	}
	data := o.data
	var err error
	if data == nil {
		if data, err = MarshalTurnFinished(ev); err != nil {
			return err
		}
	}
	subject := n.TurnFinishedSubject(ev.GetUserId())
	header := nats.Header{"Content-Type": []string{turnFinishedContentType}}
	if o.keys != nil {
		signed := &nats.Msg{Subject: subject, Data: data, Header: header}
		o.keys.Sign(signed, time.Now())
	}
	for attempt := 0; ; attempt++ {
		msg := &nats.Msg{Subject: subject, Data: data, Header: maps.Clone(header)}
		_, err = js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.GetTurnId()), jetstream.WithExpectStream(n.Stream))
		if err == nil {
			return nil
		}
		if !backoff.Sleep(ctx, publishRetry.Delay(attempt)) {
			return fmt.Errorf("publish %s: %w (last error: %v)", subject, ctx.Err(), err)
		}
	}
}

// publishRetry spaces the retries of a publish. The jitter matters after a NATS outage: every
// replica's outbox failed together and would otherwise retry in lockstep.
var publishRetry = backoff.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}

// redactURL drops the credentials (user, password or token) from a server URL for logs and
// errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// Embedded is a NATS server with JetStream running inside the process (monolithic mode).
type Embedded struct {
	srv   *server.Server
	token string
}

// StartEmbedded starts a NATS server with a JetStream file store in dir, listening on a random
// loopback port. It requires a token generated at start, so another local user cannot read
// every user's turn events or publish forged ones.
func StartEmbedded(dir string) (*Embedded, error) {
	return StartEmbeddedWith(dir, EmbeddedOptions{})
}

// EmbeddedOptions configure the embedded NATS server.
type EmbeddedOptions struct {
	// Port is the loopback port to listen on; 0 picks a free one.
	Port int
}

// StartEmbeddedWith is StartEmbedded with options (a fixed port, so tools on this host can
// reach the server with the token).
func StartEmbeddedWith(dir string, o EmbeddedOptions) (*Embedded, error) {
	if o.Port < 0 || o.Port > 65535 {
		return nil, fmt.Errorf("embedded NATS: port %d out of range", o.Port)
	}
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return nil, fmt.Errorf("embedded NATS: token: %w", err)
	}
	token := hex.EncodeToString(tok)
	srv, err := server.NewServer(&server.Options{
		ServerName:    "hermes-embedded",
		Host:          "127.0.0.1",
		Port:          port,
		JetStream:     true,
		StoreDir:      dir,
		NoSigs:        true,
		NoLog:         true,
		Authorization: token,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("embedded NATS: not ready after 10s")
	}
	return &Embedded{srv: srv, token: token}, nil
}

// URL is the client URL of the embedded server, with its token: keep it out of logs (Addr).
func (e *Embedded) URL() string {
	return strings.Replace(e.srv.ClientURL(), "nats://", "nats://"+e.token+"@", 1)
}

// InProcess is the option that connects this process's client to the server without a socket
// (the token still applies): publishing, consuming and acknowledging a turn's event cost no
// system calls.
func (e *Embedded) InProcess() nats.Option { return nats.InProcessServer(e.srv) }

// Addr is the server's address, without the token.
func (e *Embedded) Addr() string { return strings.TrimPrefix(e.srv.ClientURL(), "nats://") }

// Close stops the server.
func (e *Embedded) Close() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
