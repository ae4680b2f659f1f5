package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/rpc"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

const maxToolsFileBytes = 8 << 20

// toolsFile is the --tools-file format (YAML, or JSON, which is YAML too):
//
//	tools:
//	  - name: get_weather
//	    description: Current weather for a city.
//	    input_schema:            # a mapping, or a string of JSON
//	      type: object
//	      properties: {city: {type: string}}
//	      required: [city]
//	    timeout: 5s
//	    max_retries: 2
//	    idempotent: true
//	    groups: [weather]
//	    http: {url: "https://example.com/weather", secret_env: WEATHER_TOKEN}
type toolsFile struct {
	Tools []fileTool `yaml:"tools"`
}

type fileTool struct {
	Name           string            `yaml:"name"`
	Description    string            `yaml:"description"`
	InputSchema    yaml.Node         `yaml:"input_schema"`
	OutputSchema   yaml.Node         `yaml:"output_schema"`
	Timeout        string            `yaml:"timeout"`
	AttemptTimeout string            `yaml:"attempt_timeout"`
	MaxRetries     *int32            `yaml:"max_retries"`
	Idempotent     bool              `yaml:"idempotent"`
	Groups         []string          `yaml:"groups"`
	Labels         map[string]string `yaml:"labels"`
	HTTP           *struct {
		URL          string            `yaml:"url"`
		Headers      map[string]string `yaml:"headers"`
		SecretEnv    string            `yaml:"secret_env"`
		SecretHeader string            `yaml:"secret_header"`
	} `yaml:"http"`
	MCP *struct {
		Server string `yaml:"server"`
		Tool   string `yaml:"tool"`
	} `yaml:"mcp"`
	Builtin *struct {
		Name string `yaml:"name"`
	} `yaml:"builtin"`
}

// ParseToolsFile reads tool specs from YAML or JSON. Unknown keys are errors, so a typo does not
// silently drop a setting.
func ParseToolsFile(r io.Reader) ([]*toolsv1.ToolSpec, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxToolsFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxToolsFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxToolsFileBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f toolsFile
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var specs []*toolsv1.ToolSpec
	var errs []error
	for i, ft := range f.Tools {
		spec, err := ft.spec()
		if err != nil {
			errs = append(errs, fmt.Errorf("tools[%d] (%s): %w", i, ft.Name, err))
			continue
		}
		specs = append(specs, spec)
	}
	return specs, errors.Join(errs...)
}

func (ft *fileTool) spec() (*toolsv1.ToolSpec, error) {
	spec := &toolsv1.ToolSpec{
		Name:        ft.Name,
		Description: ft.Description,
		MaxRetries:  ft.MaxRetries,
		Idempotent:  ft.Idempotent,
		Groups:      ft.Groups,
		Labels:      ft.Labels,
	}
	var err error
	if spec.InputSchema, err = schemaText(&ft.InputSchema); err != nil {
		return nil, fmt.Errorf("input_schema: %w", err)
	}
	if spec.OutputSchema, err = schemaText(&ft.OutputSchema); err != nil {
		return nil, fmt.Errorf("output_schema: %w", err)
	}
	if spec.Timeout, err = durationField(ft.Timeout); err != nil {
		return nil, fmt.Errorf("timeout: %w", err)
	}
	if spec.AttemptTimeout, err = durationField(ft.AttemptTimeout); err != nil {
		return nil, fmt.Errorf("attempt_timeout: %w", err)
	}
	n := 0
	if ft.HTTP != nil {
		n++
		spec.Executor = &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{
			Url: ft.HTTP.URL, Headers: ft.HTTP.Headers, SecretEnv: ft.HTTP.SecretEnv, SecretHeader: ft.HTTP.SecretHeader,
		}}
	}
	if ft.MCP != nil {
		n++
		spec.Executor = &toolsv1.ToolSpec_Mcp{Mcp: &toolsv1.MCPExecutor{Server: ft.MCP.Server, Tool: ft.MCP.Tool}}
	}
	if ft.Builtin != nil {
		n++
		spec.Executor = &toolsv1.ToolSpec_Builtin{Builtin: &toolsv1.BuiltinExecutor{Name: ft.Builtin.Name}}
	}
	if n > 1 {
		return nil, errors.New("set exactly one of http, mcp and builtin")
	}
	return spec, nil
}

func durationField(s string) (*durationpb.Duration, error) {
	if s == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, err
	}
	return durationpb.New(d), nil
}

// schemaText turns a schema given as a YAML mapping into JSON, keeping its key order, or takes a
// string as JSON text.
func schemaText(n *yaml.Node) (string, error) {
	if n.Kind == 0 {
		return "", nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		return strings.TrimSpace(n.Value), nil
	}
	var buf bytes.Buffer
	if err := nodeJSON(&buf, n, 0); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func nodeJSON(buf *bytes.Buffer, n *yaml.Node, depth int) error {
	if depth > 128 {
		return errors.New("nested too deeply")
	}
	// Aliases let a few lines expand exponentially ("billion laughs"): stop at the size a schema
	// may have at all.
	if buf.Len() > maxSchemaBytes {
		return fmt.Errorf("expands to more than %d bytes", maxSchemaBytes)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			buf.WriteString("null")
			return nil
		}
		return nodeJSON(buf, n.Content[0], depth+1)
	case yaml.AliasNode:
		return nodeJSON(buf, n.Alias, depth+1)
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				buf.WriteByte(',')
			}
			k, _ := json.Marshal(n.Content[i].Value)
			buf.Write(k)
			buf.WriteByte(':')
			if err := nodeJSON(buf, n.Content[i+1], depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := nodeJSON(buf, c, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		buf.Write(b)
	}
	return nil
}

// LoadToolsFile registers every tool of the file with source "file" and unregisters tools
// registered from a file earlier that it no longer declares. Every problem is reported; nothing
// is registered when any spec is invalid.
func (s *Service) LoadToolsFile(ctx context.Context, path string) (int, error) {
	f, err := os.Open(path) // #nosec G304 -- the operator's --tools-file
	if err != nil {
		return 0, fmt.Errorf("tools file: %w", err)
	}
	defer f.Close()
	specs, err := ParseToolsFile(f)
	if err != nil {
		return 0, fmt.Errorf("tools file %s: %w", path, err)
	}
	// Check every spec before registering any, so a bad file changes nothing.
	var errs []error
	seen := map[string]bool{}
	for i, spec := range specs {
		var v rpc.Violations
		checkSpec(cloneSpec(spec), s.builtins, s.cfg.MaxTimeout, s.reg.rules, &v)
		if seen[spec.GetName()] {
			v.Add("spec.name", "%q is declared twice", spec.GetName())
		}
		seen[spec.GetName()] = true
		if err := v.Err(); err != nil {
			var parts []string
			for _, fv := range rpc.FieldViolations(err) {
				parts = append(parts, strings.TrimPrefix(fv.GetField(), "spec.")+": "+fv.GetDescription())
			}
			errs = append(errs, fmt.Errorf("tools[%d] (%s): %s", i, spec.GetName(), strings.Join(parts, "; ")))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("tools file %s: %w", path, err)
	}
	for _, spec := range specs {
		if _, _, err := s.reg.Register(ctx, spec, sourceFile, true); err != nil {
			return 0, fmt.Errorf("tools file %s: register %s: %w", path, spec.GetName(), err)
		}
	}
	list, _, err := s.reg.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("tools file %s: %w", path, err)
	}
	for _, st := range list {
		if name := st.Tool.GetSpec().GetName(); st.Tool.GetSource() == sourceFile && !seen[name] {
			if err := s.reg.Delete(ctx, name, sourceFile); err != nil && !errors.Is(err, ErrNotFound) {
				return 0, fmt.Errorf("tools file %s: unregister %s: %w", path, name, err)
			}
			s.log.InfoContext(ctx, "tool no longer in the tools file; unregistered", "tool", name)
		}
	}
	return len(specs), nil
}
