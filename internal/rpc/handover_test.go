package rpc

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// appendService answers AppendMessages with a context of n messages built afresh per call, and
// remembers the last response it built.
type appendService struct {
	sessionv1.UnimplementedSessionServiceServer
	n        int
	handover bool
	last     *sessionv1.AppendMessagesResponse
}

func (s *appendService) InProcessHandover() []string {
	if s.handover {
		return []string{"AppendMessages"}
	}
	return nil
}

func (s *appendService) AppendMessages(_ context.Context, req *sessionv1.AppendMessagesRequest) (*sessionv1.AppendMessagesResponse, error) {
	resp := &sessionv1.AppendMessagesResponse{
		State:   &sessionv1.SessionState{LastSeq: int64(s.n)},
		Context: &sessionv1.BuildContextResponse{Tokens: &sessionv1.ContextTokens{Encoding: "o200k_base"}},
	}
	for _, m := range req.GetMessages() {
		resp.Messages = append(resp.Messages, &sessionv1.Message{Content: m.GetContent(), Metadata: m.GetMetadata()})
	}
	for i := range s.n {
		text := fmt.Sprintf("message %d: what is %d × %d? 第%d条消息，计算器的答案。", i, i, i+7, i)
		resp.Context.Window = append(resp.Context.Window, &sessionv1.Message{
			Seq: int64(i + 1), Role: sessionv1.Role(1 + i%2), Content: strings.Repeat(text, 1+i%5),
			Metadata: map[string]string{"turn": fmt.Sprint(i / 2), "语言": "中文"},
		})
	}
	s.last = resp
	return resp, nil
}

// TestInProcessResponseHandover: a method its service hands over reaches the caller as the
// handler's response itself; any other method's response is a copy. The caller sees the same
// content either way.
func TestInProcessResponseHandover(t *testing.T) {
	for _, tc := range []struct {
		name     string
		handover bool
	}{
		{"copied", false},
		{"handed over", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := NewServer(ServerOptions{Logger: quiet})
			svc := &appendService{n: 7, handover: tc.handover}
			srv.Register(&sessionv1.SessionService_ServiceDesc, svc)
			client := sessionv1.NewSessionServiceClient(srv.InProcess())
			req := &sessionv1.AppendMessagesRequest{SessionId: "s", UserId: "u", Messages: []*sessionv1.NewMessage{
				{Role: sessionv1.Role_ROLE_USER, Content: "2+2？", Metadata: map[string]string{"k": "值"}},
			}}
			resp, err := client.AppendMessages(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(svc.last, resp, protocmp.Transform()); diff != "" {
				t.Errorf("response differs from the handler's (-handler +caller):\n%s", diff)
			}
			if got := resp.GetContext() == svc.last.GetContext(); got != tc.handover {
				t.Errorf("caller's context is the handler's: %v, want %v", got, tc.handover)
			}
			// The caller's request is never the handler's: the handler's copy may be changed.
			if resp.GetMessages()[0].GetMetadata()["k"] != "值" {
				t.Errorf("metadata = %v", resp.GetMessages()[0].GetMetadata())
			}
			resp.GetMessages()[0].GetMetadata()["k"] = "changed"
			if got := req.GetMessages()[0].GetMetadata()["k"]; got != "值" {
				t.Errorf("caller's request metadata changed to %q through the response", got)
			}
		})
	}
}

// BenchmarkInProcessAppendMessages is an in-process AppendMessages whose response carries a
// context of 40 messages, copied to the caller or handed over.
func BenchmarkInProcessAppendMessages(b *testing.B) {
	for _, handover := range []bool{false, true} {
		b.Run(fmt.Sprintf("handover=%v", handover), func(b *testing.B) {
			srv := NewServer(ServerOptions{Logger: quiet})
			srv.Register(&sessionv1.SessionService_ServiceDesc, &appendService{n: 40, handover: handover})
			client := sessionv1.NewSessionServiceClient(srv.InProcess())
			req := &sessionv1.AppendMessagesRequest{SessionId: "s", UserId: "u", Messages: []*sessionv1.NewMessage{
				{Role: sessionv1.Role_ROLE_USER, Content: "what is 17 × 23?"},
			}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.AppendMessages(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
