package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/status"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// errDeclined is the user's "/decline" (or "/cancel") while answering a form.
var errDeclined = errors.New("declined")

// formField is one field of an elicitation form (MCP restricts forms to flat objects of
// primitive fields).
type formField struct {
	name, typ, title, description string
	enum                          []string
	def                           any
	required                      bool
}

// formFields reads an elicitation's requested schema, fields in the schema's order of
// "required" first, then by name.
func formFields(schema string) ([]formField, error) {
	var s struct {
		Properties map[string]struct {
			Type        string   `json:"type"`
			Title       string   `json:"title"`
			Description string   `json:"description"`
			Enum        []string `json:"enum"`
			Default     any      `json:"default"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal([]byte(schema), &s); err != nil {
		return nil, fmt.Errorf("the requested form is not a JSON Schema object: %w", err)
	}
	var out []formField
	for name, p := range s.Properties {
		out = append(out, formField{name: name, typ: p.Type, title: p.Title, description: p.Description, enum: p.Enum, def: p.Default, required: slices.Contains(s.Required, name)})
	}
	slices.SortFunc(out, func(a, b formField) int {
		ra, rb := slices.Index(s.Required, a.name), slices.Index(s.Required, b.name)
		switch {
		case ra >= 0 && rb >= 0:
			return ra - rb
		case ra >= 0:
			return -1
		case rb >= 0:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return out, nil
}

// value converts a typed answer to the field's type; an empty answer is the default, or
// absent when the field is optional.
func (f formField) value(answer string) (any, bool, error) {
	answer = strings.TrimSpace(answer)
	if answer == "" {
		if f.def != nil {
			return f.def, true, nil
		}
		if f.required {
			return nil, false, errors.New("an answer is required")
		}
		return nil, false, nil
	}
	if len(f.enum) > 0 && !slices.Contains(f.enum, answer) {
		return nil, false, fmt.Errorf("choose one of %s", strings.Join(f.enum, ", "))
	}
	switch f.typ {
	case "number":
		v, err := strconv.ParseFloat(answer, 64)
		return v, err == nil, err
	case "integer":
		v, err := strconv.ParseInt(answer, 10, 64)
		return v, err == nil, err
	case "boolean":
		switch strings.ToLower(answer) {
		case "y", "yes", "true", "是":
			return true, true, nil
		case "n", "no", "false", "否":
			return false, true, nil
		}
		return nil, false, errors.New("answer yes or no")
	}
	return answer, true, nil
}

// label is how a field is asked for.
func (f formField) label() string {
	l := f.name
	if f.title != "" {
		l = f.title
	}
	var hints []string
	if len(f.enum) > 0 {
		hints = append(hints, strings.Join(f.enum, "|"))
	} else if f.typ != "" && f.typ != "string" {
		hints = append(hints, f.typ)
	}
	if f.def != nil {
		hints = append(hints, fmt.Sprintf("default %v", f.def))
	}
	if !f.required {
		hints = append(hints, "optional")
	}
	if len(hints) > 0 {
		l += " (" + strings.Join(hints, ", ") + ")"
	}
	return l
}

// fillForm asks for each field in turn; "/decline" or "/cancel" at any prompt ends it.
func fillForm(ctx context.Context, in lineReader, out func(string, ...any), fields []formField) (map[string]any, string, error) {
	content := map[string]any{}
	for _, f := range fields {
		for {
			if f.description != "" {
				out("    %s — %s\n", f.label(), f.description)
			} else {
				out("    %s\n", f.label())
			}
			line, err := in.ReadLine(ctx)
			if err != nil {
				return nil, "cancel", err
			}
			switch strings.TrimSpace(line) {
			case "/decline":
				return nil, "decline", errDeclined
			case "/cancel":
				return nil, "cancel", errDeclined
			}
			v, ok, err := f.value(line)
			if err != nil {
				out("    ! %s\n", err)
				continue
			}
			if ok {
				content[f.name] = v
			}
			break
		}
	}
	return content, "accept", nil
}

// elicit answers a tool's request for input during a turn: the chat asks the user field by
// field (or, for a URL, whether they completed it) and sends the answer with AnswerElicitation.
func (c *chatClient) elicit(ctx context.Context, turnID string, e *orchestratorv1.Elicitation) {
	if c.in == nil || turnID == "" {
		return
	}
	c.out("  ? %s asks: %s\n", e.GetServer(), e.GetMessage())
	action, content := "accept", ""
	if u := e.GetUrl(); u != "" {
		c.out("    open %s, then answer yes when done (no declines)\n", u)
		line, err := c.in.ReadLine(ctx)
		if err != nil || !strings.HasPrefix(strings.ToLower(strings.TrimSpace(line)), "y") {
			action = "decline"
		}
	} else {
		fields, err := formFields(e.GetRequestedSchema())
		if err != nil {
			c.out("  ! %s; declined\n", err)
			action = "decline"
		} else {
			c.out("    (answer each field; /decline or /cancel to refuse)\n")
			form, a, err := fillForm(ctx, c.in, c.out, fields)
			action = a
			if err == nil {
				b, _ := json.Marshal(form)
				content = string(b)
			}
		}
	}
	_, err := c.orch.AnswerElicitation(c.auth(ctx), &orchestratorv1.AnswerElicitationRequest{
		TurnId: turnID, UserId: c.user, ElicitationId: e.GetId(), Action: action, Content: content,
	})
	if err != nil {
		c.out("  ! the answer was not delivered: %s\n", status.Convert(err).Message())
		return
	}
	c.out("  ✓ %s\n", map[string]string{"accept": "answered", "decline": "declined", "cancel": "cancelled"}[action])
}
