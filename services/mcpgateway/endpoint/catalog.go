package endpoint

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
	"go.yaml.in/yaml/v3"
)

// Limits of the catalog and of what a client sends to use it.
const (
	maxCatalogBytes     = 16 << 20 // the catalog file, blobs included
	maxCatalogEntries   = 1000     // resources, templates and prompts, each
	maxPromptArgBytes   = 16 << 10 // one prompt argument value a client sends
	maxCompletionValues = 100      // values in one completion answer (MCP's own cap)
)

// catalog is the --mcp-catalog format (YAML, or JSON, which is YAML too): resources, resource
// templates and prompts that Hermes' MCP endpoint serves next to the tool service's tools.
//
//	resources:
//	  - uri: docs://hermes/readme      # required, absolute
//	    name: readme                   # required
//	    title: Hermes README
//	    description: What Hermes is.
//	    mime_type: text/markdown
//	    text: "..."                    # or blob: <base64>
//	resource_templates:
//	  - uri_template: "orders://{id}"  # RFC 6570; the variables fill {name} in the text
//	    name: order
//	    mime_type: application/json
//	    text: '{"id": "{id}"}'
//	prompts:
//	  - name: summarize                # required
//	    description: Summarize a text.
//	    arguments:
//	      - {name: text, required: true, description: The text.}
//	      - {name: style, values: [short, detailed]}   # values are offered as completions
//	    messages:                      # each with exactly one of text, image, audio, resource
//	      - {role: user, text: "Summarize in a {style} way: {text}"}
//	      - {role: user, image: {mime_type: image/png, data: <base64>}}
//	      - {role: user, resource: {uri: "docs://{text}", mime_type: text/plain, text: "..."}}
//
// A message's text and a resource's URI and text get {argument} replaced by the argument's
// value (only declared arguments; other braces stay as they are). Unknown keys are errors, so a
// typo does not silently drop a setting.
type catalog struct {
	Resources         []catalogResource `yaml:"resources"`
	ResourceTemplates []catalogTemplate `yaml:"resource_templates"`
	Prompts           []catalogPrompt   `yaml:"prompts"`
}

type catalogResource struct {
	URI         string `yaml:"uri"`
	Name        string `yaml:"name"`
	Title       string `yaml:"title"`
	Description string `yaml:"description"`
	MIMEType    string `yaml:"mime_type"`
	Text        string `yaml:"text"`
	Blob        string `yaml:"blob"`
}

type catalogTemplate struct {
	URITemplate string `yaml:"uri_template"`
	Name        string `yaml:"name"`
	Title       string `yaml:"title"`
	Description string `yaml:"description"`
	MIMEType    string `yaml:"mime_type"`
	Text        string `yaml:"text"`
}

type catalogPrompt struct {
	Name        string            `yaml:"name"`
	Title       string            `yaml:"title"`
	Description string            `yaml:"description"`
	Arguments   []catalogArgument `yaml:"arguments"`
	Messages    []catalogMessage  `yaml:"messages"`
}

type catalogArgument struct {
	Name        string   `yaml:"name"`
	Title       string   `yaml:"title"`
	Description string   `yaml:"description"`
	Required    bool     `yaml:"required"`
	Values      []string `yaml:"values"`
}

type catalogMessage struct {
	Role     string           `yaml:"role"`
	Text     *string          `yaml:"text"`
	Image    *catalogMedia    `yaml:"image"`
	Audio    *catalogMedia    `yaml:"audio"`
	Resource *catalogResource `yaml:"resource"`
}

type catalogMedia struct {
	MIMEType string `yaml:"mime_type"`
	Data     string `yaml:"data"`
}

// catalogSource is the catalog file and what was last read from it.
type catalogSource struct {
	path string

	mu      sync.Mutex // guards the fields below; held while a new catalog is applied
	modTime time.Time
	size    int64
	// failed is the stat of a version of the file that did not parse, so it is reported once,
	// not on every refresh.
	failed os.FileInfo
	cur    *catalog
	// templates are cur's compiled URI templates, by uri_template.
	templates map[string]*uritemplate.Template
}

// parseCatalog reads and checks a catalog.
func parseCatalog(r io.Reader) (*catalog, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxCatalogBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxCatalogBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxCatalogBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c catalog
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return &c, c.check()
}

func (c *catalog) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Resources) > maxCatalogEntries || len(c.ResourceTemplates) > maxCatalogEntries || len(c.Prompts) > maxCatalogEntries {
		bad("at most %d resources, %d resource templates and %d prompts", maxCatalogEntries, maxCatalogEntries, maxCatalogEntries)
	}
	uris := map[string]bool{}
	for i, r := range c.Resources {
		where := fmt.Sprintf("resources[%d]", i)
		if err := checkResource(r, true); err != nil {
			bad("%s: %v", where, err)
		}
		if uris[r.URI] {
			bad("%s: uri %q appears twice", where, r.URI)
		}
		uris[r.URI] = true
	}
	tmpls := map[string]bool{}
	for i, t := range c.ResourceTemplates {
		where := fmt.Sprintf("resource_templates[%d]", i)
		if t.Name == "" {
			bad("%s: name is required", where)
		}
		if ut, err := uritemplate.New(t.URITemplate); err != nil || t.URITemplate == "" {
			bad("%s: uri_template %q is not an RFC 6570 template: %v", where, t.URITemplate, err)
		} else if u, err := url.Parse(strings.SplitN(ut.Raw(), "{", 2)[0]); err != nil || u.Scheme == "" {
			bad("%s: uri_template %q does not start with a scheme", where, t.URITemplate)
		}
		if tmpls[t.URITemplate] {
			bad("%s: uri_template %q appears twice", where, t.URITemplate)
		}
		tmpls[t.URITemplate] = true
	}
	names := map[string]bool{}
	for i, p := range c.Prompts {
		where := fmt.Sprintf("prompts[%d]", i)
		if p.Name == "" {
			bad("%s: name is required", where)
		}
		if names[p.Name] {
			bad("%s: name %q appears twice", where, p.Name)
		}
		names[p.Name] = true
		args := map[string]bool{}
		for j, a := range p.Arguments {
			if a.Name == "" || args[a.Name] {
				bad("%s.arguments[%d]: name is required and must be unique", where, j)
			}
			args[a.Name] = true
		}
		if len(p.Messages) == 0 {
			bad("%s: messages are required", where)
		}
		for j, m := range p.Messages {
			if err := checkMessage(m); err != nil {
				bad("%s.messages[%d]: %v", where, j, err)
			}
		}
	}
	return errors.Join(errs...)
}

// checkResource checks a resource; an embedded one (in a prompt message) may have {argument}
// in its URI, so only a listed one's URI must parse.
func checkResource(r catalogResource, listed bool) error {
	if r.URI == "" {
		return errors.New("uri is required")
	}
	if listed {
		if r.Name == "" {
			return errors.New("name is required")
		}
		if u, err := url.Parse(r.URI); err != nil || u.Scheme == "" {
			return fmt.Errorf("uri %q is not an absolute URI", r.URI)
		}
	}
	if r.Text != "" && r.Blob != "" {
		return errors.New("give text or blob, not both")
	}
	if r.Blob != "" {
		if _, err := base64.StdEncoding.DecodeString(r.Blob); err != nil {
			return fmt.Errorf("blob is not base64: %v", err)
		}
	}
	return nil
}

func checkMessage(m catalogMessage) error {
	if m.Role != "user" && m.Role != "assistant" {
		return fmt.Errorf("role %q: must be user or assistant", m.Role)
	}
	n := 0
	for _, set := range []bool{m.Text != nil, m.Image != nil, m.Audio != nil, m.Resource != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errors.New("give exactly one of text, image, audio and resource")
	}
	for _, md := range []*catalogMedia{m.Image, m.Audio} {
		if md == nil {
			continue
		}
		if md.MIMEType == "" {
			return errors.New("mime_type is required")
		}
		if _, err := base64.StdEncoding.DecodeString(md.Data); err != nil || md.Data == "" {
			return fmt.Errorf("data must be base64: %v", err)
		}
	}
	if m.Resource != nil {
		return checkResource(*m.Resource, false)
	}
	return nil
}

// reloadCatalog reads the catalog file when it changed since the last read and makes the
// served resources, templates and prompts its own; subscribers of a resource whose content
// changed are notified. On error nothing changes.
func (s *Server) reloadCatalog(ctx context.Context) error {
	src := s.catalog
	if src == nil {
		return nil
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	fi, err := os.Stat(src.path)
	if err != nil {
		return fmt.Errorf("catalog %s: %w", src.path, err)
	}
	if src.cur != nil && fi.ModTime().Equal(src.modTime) && fi.Size() == src.size {
		return nil
	}
	if src.failed != nil && fi.ModTime().Equal(src.failed.ModTime()) && fi.Size() == src.failed.Size() {
		return nil
	}
	f, err := os.Open(src.path)
	if err != nil {
		return fmt.Errorf("catalog %s: %w", src.path, err)
	}
	next, err := parseCatalog(f)
	_ = f.Close()
	if err != nil {
		src.failed = fi
		return fmt.Errorf("catalog %s: %w", src.path, err)
	}
	src.failed = nil
	prev := src.cur
	if prev == nil {
		prev = &catalog{}
	}
	s.applyCatalog(ctx, prev, next)
	src.cur, src.modTime, src.size = next, fi.ModTime(), fi.Size()
	src.templates = map[string]*uritemplate.Template{}
	for _, t := range next.ResourceTemplates {
		src.templates[t.URITemplate] = uritemplate.MustNew(t.URITemplate) // checked by parseCatalog
	}
	s.log.Info("MCP endpoint: catalog read", "file", src.path, "resources", len(next.Resources),
		"resource_templates", len(next.ResourceTemplates), "prompts", len(next.Prompts))
	return nil
}

// applyCatalog registers next with the SDK server in place of prev.
func (s *Server) applyCatalog(ctx context.Context, prev, next *catalog) {
	old := map[string]catalogResource{}
	for _, r := range prev.Resources {
		old[r.URI] = r
	}
	var changed []string
	for _, r := range next.Resources {
		if o, ok := old[r.URI]; ok {
			delete(old, r.URI)
			if o == r {
				continue
			}
			changed = append(changed, r.URI)
		}
		s.server.AddResource(&mcp.Resource{URI: r.URI, Name: r.Name, Title: r.Title, Description: r.Description, MIMEType: r.MIMEType},
			staticResource(r))
	}
	for uri := range old {
		s.server.RemoveResources(uri)
	}
	oldT := map[string]bool{}
	for _, t := range prev.ResourceTemplates {
		oldT[t.URITemplate] = true
	}
	for _, t := range next.ResourceTemplates {
		delete(oldT, t.URITemplate)
		s.server.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: t.URITemplate, Name: t.Name, Title: t.Title, Description: t.Description, MIMEType: t.MIMEType},
			templateResource(t, uritemplate.MustNew(t.URITemplate)))
	}
	for t := range oldT {
		s.server.RemoveResourceTemplates(t)
	}
	oldP := map[string]bool{}
	for _, p := range prev.Prompts {
		oldP[p.Name] = true
	}
	for _, p := range next.Prompts {
		delete(oldP, p.Name)
		mp := &mcp.Prompt{Name: p.Name, Title: p.Title, Description: p.Description}
		for _, a := range p.Arguments {
			mp.Arguments = append(mp.Arguments, &mcp.PromptArgument{Name: a.Name, Title: a.Title, Description: a.Description, Required: a.Required})
		}
		s.server.AddPrompt(mp, renderPrompt(p))
	}
	for p := range oldP {
		s.server.RemovePrompts(p)
	}
	for _, uri := range changed {
		if err := s.server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
			s.log.Debug("MCP endpoint: resources/updated not sent", "uri", uri, "error", err)
		}
	}
}

func resourceContents(uri string, r catalogResource, text string) *mcp.ResourceContents {
	c := &mcp.ResourceContents{URI: uri, MIMEType: r.MIMEType}
	if r.Blob != "" {
		c.Blob, _ = base64.StdEncoding.DecodeString(r.Blob) // checked by parseCatalog
	} else {
		c.Text = text
	}
	return c
}

func staticResource(r catalogResource) mcp.ResourceHandler {
	return func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{resourceContents(r.URI, r, r.Text)}}, nil
	}
}

func templateResource(t catalogTemplate, ut *uritemplate.Template) mcp.ResourceHandler {
	return func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		vals := ut.Match(req.Params.URI)
		if vals == nil {
			return nil, mcp.ResourceNotFoundError(req.Params.URI)
		}
		vars := map[string]string{}
		for _, name := range ut.Varnames() {
			vars[name] = vals.Get(name).String()
		}
		text := substitute(t.Text, vars)
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: t.MIMEType, Text: text}}}, nil
	}
}

func renderPrompt(p catalogPrompt) mcp.PromptHandler {
	return func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		vars := map[string]string{}
		var args map[string]string
		if req.Params != nil {
			args = req.Params.Arguments
		}
		for _, a := range p.Arguments {
			v, ok := args[a.Name]
			if !ok && a.Required {
				return nil, invalidParams(fmt.Sprintf("prompt %q needs the argument %q", p.Name, a.Name))
			}
			if len(v) > maxPromptArgBytes {
				return nil, invalidParams(fmt.Sprintf("argument %q is %d bytes; at most %d are accepted", a.Name, len(v), maxPromptArgBytes))
			}
			vars[a.Name] = v
		}
		res := &mcp.GetPromptResult{Description: p.Description}
		for _, m := range p.Messages {
			pm := &mcp.PromptMessage{Role: mcp.Role(m.Role)}
			switch {
			case m.Text != nil:
				pm.Content = &mcp.TextContent{Text: substitute(*m.Text, vars)}
			case m.Image != nil:
				data, _ := base64.StdEncoding.DecodeString(m.Image.Data) // checked by parseCatalog
				pm.Content = &mcp.ImageContent{MIMEType: m.Image.MIMEType, Data: data}
			case m.Audio != nil:
				data, _ := base64.StdEncoding.DecodeString(m.Audio.Data)
				pm.Content = &mcp.AudioContent{MIMEType: m.Audio.MIMEType, Data: data}
			case m.Resource != nil:
				r := *m.Resource
				pm.Content = &mcp.EmbeddedResource{Resource: resourceContents(substitute(r.URI, vars), r, substitute(r.Text, vars))}
			}
			res.Messages = append(res.Messages, pm)
		}
		return res, nil
	}
}

// invalidParams is a JSON-RPC invalid-params error (-32602) with msg.
func invalidParams(msg string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}

var placeholder = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_.-]*)\}`)

// substitute replaces {name} by vars[name] for the names in vars; other braces stay.
func substitute(s string, vars map[string]string) string {
	if len(vars) == 0 || !strings.Contains(s, "{") {
		return s
	}
	return placeholder.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vars[m[1:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// current is the catalog last read (empty without one).
func (s *Server) current() *catalog {
	if s.catalog == nil {
		return &catalog{}
	}
	s.catalog.mu.Lock()
	defer s.catalog.mu.Unlock()
	if s.catalog.cur == nil {
		return &catalog{}
	}
	return s.catalog.cur
}

// complete offers the values a prompt argument declares that start with what the user typed
// (case-insensitively); other references get no values.
func (s *Server) complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	res := &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}
	p := req.Params
	if p == nil || p.Ref == nil || p.Ref.Type != "ref/prompt" {
		return res, nil
	}
	prefix := strings.ToLower(p.Argument.Value)
	for _, pr := range s.current().Prompts {
		if pr.Name != p.Ref.Name {
			continue
		}
		for _, a := range pr.Arguments {
			if a.Name != p.Argument.Name {
				continue
			}
			for _, v := range a.Values {
				if strings.HasPrefix(strings.ToLower(v), prefix) {
					res.Completion.Values = append(res.Completion.Values, v)
				}
			}
		}
	}
	res.Completion.Total = len(res.Completion.Values)
	if len(res.Completion.Values) > maxCompletionValues {
		res.Completion.Values, res.Completion.HasMore = res.Completion.Values[:maxCompletionValues], true
	}
	return res, nil
}

// subscribe accepts subscriptions to the catalog's resources only, which bounds what the SDK
// keeps per session.
func (s *Server) subscribe(_ context.Context, req *mcp.SubscribeRequest) error {
	if req.Params != nil && slices.ContainsFunc(s.current().Resources, func(r catalogResource) bool { return r.URI == req.Params.URI }) {
		return nil
	}
	uri := ""
	if req.Params != nil {
		uri = req.Params.URI
	}
	return mcp.ResourceNotFoundError(uri)
}
