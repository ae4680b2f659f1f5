package mcpgateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Error codes of a CallToolResponse that did not fail as the tool's own result.
const (
	codeUnavailable   = "unavailable"
	codeTimeout       = "timeout"
	codeUnknownTool   = "unknown_tool"
	codeInvalidOutput = "invalid_output"
	codeRejected      = "rejected"
)

// objectSchema checks that raw is a JSON Schema describing an object and returns it compacted.
// MCP requires tool schemas to be object schemas; anything else (a missing schema, "type":
// "string", a boolean schema) is refused here so it never reaches a model or a validator that
// would choke on it.
func objectSchema(raw any) (string, error) {
	if raw == nil {
		return "", fmt.Errorf("the schema is missing")
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return "", fmt.Errorf("the schema is not JSON: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return "", fmt.Errorf("the schema is not a JSON object: %s", abbreviate(string(data), 80))
	}
	if t, ok := m["type"]; !ok || t != "object" {
		return "", fmt.Errorf(`the schema's type is %s, not "object"`, abbreviate(jsonString(t), 40))
	}
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// compileSchema compiles a JSON Schema (draft 2020-12 unless it says otherwise).
func compileSchema(schema string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mcp-output-schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("mcp-output-schema.json")
}

func jsonString(v any) string {
	if v == nil {
		return "missing"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// mediaCaps bound the media bytes a result carries on: one block, and all blocks of a result.
// Zero caps carry none (the blocks are only described).
type mediaCaps struct{ item, total int }

// mediaBudget is what is left of the caps while a result is normalized.
type mediaBudget struct {
	caps mediaCaps
	used int
}

// attach gives d the block's bytes when they fit the caps, and otherwise says which cap left
// them out (d.Size stays the true size).
func (b *mediaBudget) attach(d *pb.Content, data []byte) *pb.Content {
	switch {
	case b.caps.item <= 0 || len(data) == 0:
	case len(data) > b.caps.item:
		d.Omitted = fmt.Sprintf("%d bytes, over the %d-byte cap on one media block (mcpgateway.max-media-item-bytes)", len(data), b.caps.item)
	case b.used+len(data) > b.caps.total:
		d.Omitted = fmt.Sprintf("%d bytes, over what is left of the %d-byte cap on the media of one result (mcpgateway.max-media-bytes)", len(data), b.caps.total)
	default:
		d.Data = data
		b.used += len(data)
	}
	return d
}

// normalizeResult turns an MCP tool result into the gateway's {success, output}: text blocks
// joined; structuredContent as JSON, validated against the output schema when the tool has
// one; isError as success=false with the server's message; every other block in contents
// (type, MIME type, URI, size; an embedded text resource with its cleaned text; the bytes of
// images, audio and binary resources within media's caps), never dropped. Output cut to
// opts.MaxBytes says so, with its original size and the cap.
func normalizeResult(res *mcp.CallToolResult, out *jsonschema.Schema, opts CleanOptions, media mediaCaps) *pb.CallToolResponse {
	resp := &pb.CallToolResponse{Success: !res.IsError}
	budget := &mediaBudget{caps: media}
	var texts []string
	for _, c := range res.Content {
		switch v := c.(type) {
		case *mcp.TextContent:
			if userOnly(v.Annotations) {
				resp.UserText = append(resp.UserText, CleanText(v.Text, "", opts).Text)
				continue
			}
			texts = append(texts, v.Text)
		case *mcp.ImageContent:
			resp.Contents = append(resp.Contents, budget.attach(&pb.Content{Type: "image", MimeType: v.MIMEType, Size: int64(len(v.Data))}, v.Data))
		case *mcp.AudioContent:
			resp.Contents = append(resp.Contents, budget.attach(&pb.Content{Type: "audio", MimeType: v.MIMEType, Size: int64(len(v.Data))}, v.Data))
		case *mcp.ResourceLink:
			d := &pb.Content{Type: "resource_link", MimeType: v.MIMEType, Uri: v.URI, Text: CleanText(v.Name, "text/plain", CleanOptions{MaxBytes: 256}).Text}
			if v.Size != nil {
				d.Size = *v.Size
			}
			resp.Contents = append(resp.Contents, d)
		case *mcp.EmbeddedResource:
			if userOnly(v.Annotations) {
				if r := v.Resource; r != nil && r.Blob == nil {
					resp.UserText = append(resp.UserText, CleanText(r.Text, r.MIMEType, opts).Text)
				}
				continue
			}
			d := &pb.Content{Type: "resource"}
			if r := v.Resource; r != nil {
				d.Uri, d.MimeType = r.URI, r.MIMEType
				if r.Blob != nil {
					d.Size = int64(len(r.Blob))
					budget.attach(d, r.Blob)
				} else {
					d.Size = int64(len(r.Text))
					d.Text = CleanText(r.Text, r.MIMEType, opts).Text
				}
			}
			resp.Contents = append(resp.Contents, d)
		default:
			resp.Contents = append(resp.Contents, &pb.Content{Type: strings.TrimPrefix(fmt.Sprintf("%T", c), "*mcp.")})
		}
	}
	text := strings.Join(texts, "\n")
	if res.IsError {
		if strings.TrimSpace(text) == "" && len(resp.Contents) > 0 {
			var notes []string
			for _, d := range resp.Contents {
				notes = append(notes, describeContent(d))
			}
			text = strings.Join(notes, "\n")
		}
		if strings.TrimSpace(text) == "" {
			text = "the tool reported an error without a message"
		}
		c := CleanText(text, "", opts)
		resp.Output, resp.Truncated = c.Text, c.Truncated
		return resp
	}
	if res.StructuredContent != nil {
		raw, err := json.Marshal(res.StructuredContent)
		if err != nil {
			resp.Success, resp.ErrorCode = false, codeInvalidOutput
			resp.Output = "the server's structuredContent is not JSON: " + err.Error()
			return resp
		}
		if out != nil {
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err == nil {
				err = out.Validate(v)
			}
			if err != nil {
				resp.Success, resp.ErrorCode = false, codeInvalidOutput
				resp.Output = "the server's structuredContent does not match the tool's output schema: " + abbreviate(err.Error(), 2000)
				return resp
			}
		}
		if opts.MaxBytes > 0 && len(raw) > opts.MaxBytes {
			// JSON cannot be cut and stay JSON: the model gets the text the tool returned beside
			// it (MCP asks for a text serialization too), cut to the cap, or else a preview.
			if strings.TrimSpace(text) == "" {
				text = fmt.Sprintf("[structured content of %d bytes, over the %d-byte cap on a tool's output; its start:]\n%s", len(raw), opts.MaxBytes, raw)
			}
			c := CleanText(text, "", opts)
			resp.Output, resp.Truncated = c.Text, true
			resp.OriginalBytes, resp.LimitBytes = int64(max(len(raw), c.Bytes)), int64(opts.MaxBytes)
			return resp
		}
		resp.Output, resp.Structured = string(raw), true
		return resp
	}
	c := CleanText(text, "", opts)
	resp.Output, resp.Truncated = c.Text, c.Truncated
	if c.Truncated {
		resp.OriginalBytes, resp.LimitBytes = int64(c.Bytes), int64(opts.MaxBytes)
	}
	return resp
}

// userOnly reports whether a block is meant only for the user (audience ["user"]), so it must
// not enter a model's context.
func userOnly(a *mcp.Annotations) bool {
	if a == nil || len(a.Audience) == 0 {
		return false
	}
	for _, r := range a.Audience {
		if r != "user" {
			return false
		}
	}
	return true
}

// describeContent is the one line a model sees for a non-text block.
func describeContent(d *pb.Content) string {
	var parts []string
	if d.Uri != "" {
		parts = append(parts, d.Uri)
	}
	if d.MimeType != "" {
		parts = append(parts, d.MimeType)
	}
	if d.Size > 0 || d.Type == "image" || d.Type == "audio" {
		parts = append(parts, fmt.Sprintf("%d bytes", d.Size))
	}
	if d.Omitted != "" {
		parts = append(parts, "not passed on: "+d.Omitted)
	}
	line := "[" + d.Type
	if len(parts) > 0 {
		line += ": " + strings.Join(parts, ", ")
	}
	line += "]"
	switch {
	case d.Type == "resource" && d.Text != "":
		line += "\n" + d.Text
	case d.Type == "resource_link" && d.Text != "":
		line += " " + d.Text
	}
	return line
}
