package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// omitConn refuses the methods a process does not serve although it serves their service (the
// edge's non-forwarded methods, internal/edge) as a route that does not exist: NOT_FOUND, which
// the gateway answers with 404 like an unknown path. They never reach the gRPC server.
type omitConn struct {
	grpc.ClientConnInterface
	omit map[string]bool
}

func (c omitConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if c.omit[method] {
		return notServed(method)
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

func (c omitConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if c.omit[method] {
		return nil, notServed(method)
	}
	return c.ClientConnInterface.NewStream(ctx, desc, method, opts...)
}

func notServed(method string) error {
	return status.Errorf(codes.NotFound, "%s is not served at this address", method)
}

// servedOpenAPI returns the OpenAPI document doc reduced to the operations of services (full
// gRPC service names) that are not in omit (full method names): a client reading it finds only
// what answers here. Tags of services not served go too. A process that serves everything
// serves the document as generated.
func servedOpenAPI(doc string, services, omit []string) (string, error) {
	var d map[string]any
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return "", fmt.Errorf("openapi document: %w", err)
	}
	// operationId is "<Service>_<Method>" (protoc-gen-openapiv2), the service without its package.
	served := map[string]bool{}
	short := map[string]bool{}
	for _, s := range services {
		short[s[strings.LastIndex(s, ".")+1:]] = true
	}
	omitted := map[string]bool{}
	for _, m := range omit {
		svc, name, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
		if ok {
			omitted[svc[strings.LastIndex(svc, ".")+1:]+"_"+name] = true
		}
	}
	changed := false
	paths, _ := d["paths"].(map[string]any)
	for path, item := range paths {
		ops, _ := item.(map[string]any)
		for verb, op := range ops {
			o, _ := op.(map[string]any)
			id, _ := o["operationId"].(string)
			svc, _, _ := strings.Cut(id, "_")
			if !short[svc] || omitted[id] {
				delete(ops, verb)
				changed = true
				continue
			}
			served[svc] = true
		}
		if len(ops) == 0 {
			delete(paths, path)
		}
	}
	if !changed {
		return doc, nil
	}
	if tags, ok := d["tags"].([]any); ok {
		d["tags"] = slices.DeleteFunc(tags, func(t any) bool {
			m, _ := t.(map[string]any)
			name, _ := m["name"].(string)
			return !served[name]
		})
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return "", fmt.Errorf("openapi document: %w", err)
	}
	return string(out), nil
}
