package orchestrator

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/hermes-agent/hermes/internal/model"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestToolImagesReachImageModels: an image a tool returned reaches a model listed in
// ImageModels as an image part of a user message after the tool results; any other model gets
// only the tool's text, which describes the image.
func TestToolImagesReachImageModels(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n-tiny")
	for _, tc := range []struct {
		name       string
		models     []string
		wantImages int
	}{
		{"image model", []string{"fake"}, 1},
		{"every model", []string{"*"}, 1},
		{"text-only model", nil, 0},
		{"another model listed", []string{"gpt-4o"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen []model.Message // the messages after the tool result, in the second request
			reply := func(_ context.Context, req model.Request) (*model.Response, error) {
				if isSummary(req) {
					return &model.Response{Content: `{"goal":"g","decisions":[],"facts":[],"open_items":[]}`}, nil
				}
				for i, m := range req.Messages {
					if m.Role == model.RoleTool {
						mu.Lock()
						seen = append([]model.Message(nil), req.Messages[i+1:]...)
						mu.Unlock()
						return &model.Response{Content: "a logo"}, nil
					}
				}
				return &model.Response{ToolCalls: []model.ToolCall{{ID: "call_0", Name: "calc", Arguments: `{}`}}}, nil
			}
			l := newLoop(t, Config{ImageModels: tc.models}, reply)
			l.tools.exec = func(context.Context, *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
				return &toolsv1.ToolResult{Success: true, Output: `"a picture\n[image image/png 14 bytes]"`,
					Media: []*toolsv1.Media{{Type: "image", MimeType: "image/png", Data: png, Size: int64(len(png))}}}, nil
			}
			if done := l.run(t, "s1", "what is the tool's picture?", nil).final().GetCompleted(); done == nil {
				t.Fatal("the turn did not complete")
			}
			mu.Lock()
			defer mu.Unlock()
			images := 0
			for _, m := range seen {
				for _, img := range m.Images {
					if m.Role != model.RoleUser || img.MIMEType != "image/png" || !bytes.Equal(img.Data, png) || !strings.Contains(m.Content, "calc") {
						t.Errorf("image message %+v", m)
					}
					images++
				}
			}
			if images != tc.wantImages {
				t.Errorf("%d images after the tool result, want %d", images, tc.wantImages)
			}
		})
	}
}
