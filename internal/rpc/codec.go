package rpc

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	encproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// utf8Codec is the proto codec of the server with one difference: a request whose string field
// holds invalid UTF-8 is a client's mistake, INVALID_ARGUMENT, but grpc-go reports every decoding
// failure as INTERNAL before any interceptor runs. So such a request is decoded with the bad
// strings made valid and remembered; the outermost interceptor (checkUTF8) answers it with
// INVALID_ARGUMENT naming the field before any handler sees it.
type utf8Codec struct {
	base encoding.CodecV2
	// bad holds the decoded messages that had invalid UTF-8, by pointer, until the interceptor
	// takes them; each entry lives for one request.
	bad sync.Map
}

func newUTF8Codec() *utf8Codec { return &utf8Codec{base: encoding.GetCodecV2(encproto.Name)} }

func (c *utf8Codec) Name() string { return encproto.Name }

func (c *utf8Codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c *utf8Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	buf := data.Materialize()
	fixed, field := sanitizeUTF8(buf, m.ProtoReflect().Descriptor(), "")
	if field == "" {
		return err
	}
	if err2 := proto.Unmarshal(fixed, m); err2 != nil {
		return err
	}
	c.bad.Store(m, field)
	return nil
}

// take reports (once) whether msg was decoded with invalid UTF-8, and in which field.
func (c *utf8Codec) take(msg any) (string, bool) {
	if msg == nil {
		return "", false
	}
	f, ok := c.bad.LoadAndDelete(msg)
	if !ok {
		return "", false
	}
	return f.(string), true
}

// invalidUTF8Error is the refusal of a request whose string field is not valid UTF-8, from the
// network (checkUTF8Unary) or in process (LocalUnary).
func invalidUTF8Error(field string) error {
	return status.Errorf(codes.InvalidArgument, "invalid request: %s is not valid UTF-8", field)
}

// maxSanitizeDepth bounds the recursion into nested messages.
const maxSanitizeDepth = 100

// sanitizeUTF8 rewrites the wire bytes of a message so every string field is valid UTF-8, and
// returns the path of the first field that was not ("" when all were).
func sanitizeUTF8(b []byte, md protoreflect.MessageDescriptor, path string) ([]byte, string) {
	return sanitizeDepth(b, md, path, 0)
}

func sanitizeDepth(b []byte, md protoreflect.MessageDescriptor, path string, depth int) ([]byte, string) {
	if depth > maxSanitizeDepth {
		return b, ""
	}
	out := make([]byte, 0, len(b))
	first := ""
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return append(out, b...), first
		}
		tag := b[:n]
		b = b[n:]
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return append(append(out, tag...), b...), first
			}
			out = append(append(out, tag...), b[:m]...)
			b = b[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return append(append(out, tag...), b...), first
		}
		b = b[m:]
		fd := md.Fields().ByNumber(num)
		name := fmt.Sprintf("%s%d", path, num)
		if fd != nil {
			name = path + string(fd.Name())
		}
		switch {
		case fd != nil && fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
			v = []byte(toValidUTF8(v))
			if first == "" {
				first = name
			}
		case fd != nil && (fd.Kind() == protoreflect.MessageKind):
			var sub string
			v, sub = sanitizeDepth(v, fd.Message(), name+".", depth+1)
			if first == "" {
				first = sub
			}
		}
		out = protowire.AppendBytes(append(out, tag...), v)
	}
	return out, first
}

func toValidUTF8(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// checkUTF8Unary answers a request decoded with invalid UTF-8 before anything else runs.
func (c *utf8Codec) checkUTF8Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if field, bad := c.take(req); bad {
			return nil, invalidUTF8Error(field)
		}
		return handler(ctx, req)
	}
}

// checkUTF8Stream does the same for every message a stream receives.
func (c *utf8Codec) checkUTF8Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &utf8Stream{ServerStream: ss, c: c})
	}
}

type utf8Stream struct {
	grpc.ServerStream
	c *utf8Codec
}

func (s *utf8Stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if field, bad := s.c.take(m); bad {
		return invalidUTF8Error(field)
	}
	return nil
}
