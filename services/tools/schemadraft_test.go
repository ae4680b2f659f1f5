package tools

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDraftSchema(t *testing.T) {
	type contact struct {
		Name  string `json:"name" jsonschema:"Full name"`
		Phone string `json:"phone,omitempty"`
	}
	type booking struct {
		City    string            `json:"city" jsonschema:"City to book in"`
		Guests  int               `json:"guests"`
		Price   *float64          `json:"price"`
		Tags    []string          `json:"tags,omitempty"`
		Contact contact           `json:"contact"`
		Extra   map[string]bool   `json:"extra,omitempty"`
		Skip    string            `json:"-"`
		hidden  string            // unexported: left out
		Labels  map[string]string `json:"labels,omitzero"`
	}
	got, err := DraftSchema(booking{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"additionalProperties":false,"properties":{
		"city":{"description":"City to book in","type":"string"},
		"contact":{"additionalProperties":false,"properties":{"name":{"description":"Full name","type":"string"},"phone":{"type":"string"}},"required":["name"],"type":"object"},
		"extra":{"additionalProperties":{"type":"boolean"},"type":"object"},
		"guests":{"type":"integer"},
		"labels":{"additionalProperties":{"type":"string"},"type":"object"},
		"price":{"type":["null","number"]},
		"tags":{"items":{"type":"string"},"type":["null","array"]}},
		"required":["city","guests","price","contact"],"type":"object"}`
	var g, w any
	_ = json.Unmarshal([]byte(got), &g)
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("draft (-want +got):\n%s", diff)
	}
	// The draft is a valid object schema the registry accepts.
	if _, err := compileSchema(got, true); err != nil {
		t.Errorf("draft does not compile: %v", err)
	}
	if _, err := DraftSchema(42); err == nil {
		t.Error("a non-struct was accepted")
	}
	if _, err := DraftSchema(struct{ C chan int }{}); err == nil {
		t.Error("a channel field was accepted")
	}
	_ = booking{}.hidden
}
