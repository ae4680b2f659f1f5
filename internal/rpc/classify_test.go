package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/errclass"
)

func TestClassify(t *testing.T) {
	backend := errors.New("dial tcp 10.0.0.7:6379: connection refused")
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string // the reply's message contains it
		hide string // the reply's message must not contain it
	}{
		{"status passes", status.Error(codes.NotFound, "session x not found"), codes.NotFound, "session x not found", ""},
		{"cancelled", fmt.Errorf("read: %w", context.Canceled), codes.Canceled, "cancelled", ""},
		{"a stream's client gone", fmt.Errorf("send: %w", io.EOF), codes.Canceled, "cancelled", ""},
		// A Redis connection closed under a command (Redis killed mid-call) is the backend's
		// outage, not the caller's cancellation (it failed a turn as CANCELLED once).
		{"backend connection closed", errclass.Mark(errclass.Unavailable, "redis append", io.EOF), codes.Unavailable, "unavailable", ""},
		{"backend connection closed, sentinel", fmt.Errorf("store: %w: %w", errclass.Unavailable, io.EOF), codes.Unavailable, "unavailable", ""},
		{"deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "deadline", ""},
		{"backend, wrapped sentinel", fmt.Errorf("store: %w: %w", errclass.Unavailable, backend), codes.Unavailable, "backend is unavailable", "10.0.0.7"},
		{"backend, with a message", errclass.New(errclass.Unavailable, "the session store is unavailable", backend), codes.Unavailable, "session store is unavailable", "10.0.0.7"},
		{"not found", errclass.New(errclass.NotFound, "turn t1 not found", nil), codes.NotFound, "turn t1 not found", ""},
		{"conflict", fmt.Errorf("lease: %w", errclass.Conflict), codes.Aborted, "retry", ""},
		{"invalid", errclass.New(errclass.Invalid, "page_token is not valid", nil), codes.InvalidArgument, "page_token", ""},
		{"exhausted", errclass.New(errclass.Exhausted, "too many servers", nil), codes.ResourceExhausted, "too many", ""},
		{"precondition", errclass.New(errclass.Precondition, "no model is configured", nil), codes.FailedPrecondition, "no model", ""},
		{"backend status, marked", errclass.Mark(errclass.Unavailable, "qdrant query", status.Error(codes.InvalidArgument, "bad filter on 10.0.0.7")), codes.Unavailable, "backend is unavailable", "10.0.0.7"},
		{"publisher", fmt.Errorf("append: %w", published{}), codes.FailedPrecondition, "last seq is 3", ""},
		{"a bug", errors.New("index out of range in secret/path.go"), codes.Internal, "internal error", "secret/path.go"},
	} {
		err := Classify(context.Background(), nil, "/hermes.test.v1.T/M", tc.err)
		st := status.Convert(err)
		if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) || tc.hide != "" && strings.Contains(st.Message(), tc.hide) {
			t.Errorf("%s: %s %q, want %s containing %q without %q", tc.name, st.Code(), st.Message(), tc.code, tc.msg, tc.hide)
		}
	}
}

// published is a domain error with a class and a message of its own.
type published struct{}

func (published) Error() string        { return "conflict at seq 3" }
func (published) Public() string       { return "the last seq is 3" }
func (published) Is(target error) bool { return target == errclass.Precondition }

func TestCodeName(t *testing.T) {
	for c, want := range map[codes.Code]string{codes.Canceled: "CANCELLED", codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.OK: "OK", codes.InvalidArgument: "INVALID_ARGUMENT", codes.Unavailable: "UNAVAILABLE", codes.FailedPrecondition: "FAILED_PRECONDITION"} {
		if got := CodeName(c); got != want {
			t.Errorf("CodeName(%v) = %q, want %q", c, got, want)
		}
	}
}

// rawCodec sends bytes as they are, so a test can send what a Go client would refuse to marshal.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return nil }
func (rawCodec) Name() string                       { return "proto" }

// TestInvalidUTF8IsInvalidArgument: a request whose string field is not UTF-8 is the client's
// mistake (it was INTERNAL, from grpc-go's decoding), named by its field.
func TestInvalidUTF8IsInvalidArgument(t *testing.T) {
	_, _, conn, _, _ := start(t, ServerOptions{})
	// SimpleRequest.response_status (7) { message (2): "\xff\xfe" }
	inner := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0xff, 0xfe})
	req := protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), inner)
	err := conn.Invoke(context.Background(), "/grpc.testing.TestService/UnaryCall", req, new([]byte), grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "response_status.message is not valid UTF-8") {
		t.Fatalf("invalid UTF-8: %v, want INVALID_ARGUMENT naming response_status.message", err)
	}
	// The server goes on answering valid requests.
	if _, err := testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
}

// FuzzSanitizeUTF8: any bytes sanitized for any message type decode, as that type, without a
// UTF-8 error.
func FuzzSanitizeUTF8(f *testing.F) {
	inner := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0xff})
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), inner))
	f.Add([]byte{0x0a, 0x02, 0xc3, 0x28})
	f.Fuzz(func(t *testing.T, b []byte) {
		md := (&testpb.SimpleRequest{}).ProtoReflect().Descriptor()
		fixed, _ := sanitizeUTF8(b, md, "")
		if err := proto.Unmarshal(b, &testpb.SimpleRequest{}); err == nil {
			return
		}
		err := proto.Unmarshal(fixed, &testpb.SimpleRequest{})
		if err != nil && strings.Contains(err.Error(), "UTF-8") {
			t.Fatalf("still invalid UTF-8 after sanitizing: %v", err)
		}
	})
}
