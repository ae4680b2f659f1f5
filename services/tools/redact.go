package tools

import (
	"context"
	"net/url"

	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/auth"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// redactedValue replaces a secret in a spec a user key reads.
const redactedValue = "REDACTED"

// userView reports whether the caller of ctx is a user key. Users see what a tool does (its
// name, description and schemas), not how the operator configured it to run: a webhook's URL
// may carry credentials (https://user:pass@…), a token in its query (?token=…) or in its path
// (chat webhooks put theirs there), and its headers secrets under any name. Operators, services
// and anonymous callers (authentication off) see the whole spec.
func userView(ctx context.Context) bool {
	p, ok := auth.FromContext(ctx)
	return ok && !p.Anonymous && p.Role == auth.RoleUser
}

// redactTool returns a copy of t without the secrets its executor may hold; t itself (shared
// with the registry's cache) is left alone.
func redactTool(t *toolsv1.Tool) *toolsv1.Tool {
	h := t.GetSpec().GetHttp()
	if h == nil {
		return t
	}
	out := proto.Clone(t).(*toolsv1.Tool)
	h = out.GetSpec().GetHttp()
	h.Url = redactURL(h.GetUrl())
	for k := range h.Headers {
		h.Headers[k] = redactedValue
	}
	return out
}

// redactURL keeps a URL's scheme, host and query keys: the credentials go, the path and each
// query value become REDACTED, the fragment goes. A URL that does not parse is REDACTED whole.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return redactedValue
	}
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	if u.Path != "" && u.Path != "/" {
		u.Path, u.RawPath = "/"+redactedValue, ""
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = redactedValue
		} else {
			for k, vs := range q {
				for i := range vs {
					vs[i] = redactedValue
				}
				q[k] = vs
			}
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

// redactTools redacts tools in place for a user caller: the one place each response that
// carries specs passes through.
func redactTools(ctx context.Context, tools []*toolsv1.Tool) {
	if !userView(ctx) {
		return
	}
	for i, t := range tools {
		tools[i] = redactTool(t)
	}
}
