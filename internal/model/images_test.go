package model_test

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/model/scripted"
)

// TestUserMessageImages: a user message's images go out as image_url parts with data URIs after
// its text, the way Chat Completions takes image input (a tool message cannot carry them).
func TestUserMessageImages(t *testing.T) {
	c, srv := start(t, scripted.Sequence(scripted.Text("a logo")), model.Config{})
	png := []byte("\x89PNG\r\n\x1a\n-not-really")
	_, err := c.Complete(context.Background(), model.Request{Messages: []model.Message{
		{Role: model.RoleUser, Content: "what is this?"},
		{Role: model.RoleUser, Content: "the image the tool returned:", Images: []model.Image{{MIMEType: "image/png", Data: png}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := srv.Requests()[0].Messages
	want := []scripted.Message{
		{Role: "user", Content: "what is this?"},
		{Role: "user", Content: "the image the tool returned:", ImageURLs: []string{"data:image/png;base64," + base64.StdEncoding.EncodeToString(png)}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
}
