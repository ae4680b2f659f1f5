package auth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestEveryRPCHasAPolicy: every method of every Hermes service declared in the protos has an
// entry in the policy table, so a new RPC cannot be served before someone decides who may call
// it (a method without an entry is refused for everyone).
func TestEveryRPCHasAPolicy(t *testing.T) {
	policy := Policy()
	// The OAuth redirect of per-user MCP connections arrives from a browser without a key; the
	// single-use state, bound to a user and unguessable, is its credential.
	publicByDesign := map[string]bool{mcpgatewayv1.MCPGatewayService_CompleteAuthorization_FullMethodName: true}
	var methods int
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "hermes.") {
			return true
		}
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				md := sd.Methods().Get(j)
				name := "/" + string(sd.FullName()) + "/" + string(md.Name())
				methods++
				acc, ok := policy[name]
				if !ok {
					t.Errorf("%s has no entry in the policy table (internal/auth/policy.go)", name)
					continue
				}
				if acc.Public && !publicByDesign[name] {
					t.Errorf("%s is public: only health checks and the OAuth redirect may be", name)
				}
				if len(acc.Roles) == 0 && !acc.Public {
					t.Errorf("%s: no role may call it", name)
				}
				if acc.UserScoped {
					f := md.Input().Fields().ByName("user_id")
					if f == nil || f.Kind() != protoreflect.StringKind || f.IsList() {
						t.Errorf("%s is user-scoped but %s has no string user_id", name, md.Input().FullName())
					}
				}
			}
		}
		return true
	})
	if methods < 36 {
		t.Fatalf("found %d Hermes methods; the proto packages are not linked in", methods)
	}
}

// TestOperatorOnlyPowers pins the decisions that keep dangerous powers from users: a user key
// may not register tools or MCP servers, run tools directly, run maintenance or write summaries.
func TestOperatorOnlyPowers(t *testing.T) {
	a := New(nil, nil)
	user := Principal{Role: RoleUser, User: "alice", Name: "user:alice"}
	for _, m := range []string{
		"/hermes.tools.v1.ToolService/RegisterTool",
		"/hermes.tools.v1.ToolService/UnregisterTool",
		"/hermes.tools.v1.ToolService/ExecuteTool",
		"/hermes.mcpgateway.v1.MCPGatewayService/AddServer",
		"/hermes.mcpgateway.v1.MCPGatewayService/RemoveServer",
		"/hermes.mcpgateway.v1.MCPGatewayService/CallTool",
		"/hermes.memory.v1.MemoryService/RunMaintenance",
		"/hermes.memory.v1.MemoryService/ExtractTurn",
		"/hermes.session.v1.SessionService/UpdateSummary",
		"/hermes.nothing.v1.Unknown/Method",
	} {
		if err := a.Authorize(user, m, nil); err == nil {
			t.Errorf("a user may call %s", m)
		}
	}
	ops := Principal{Role: RoleOperator, Name: "operator:ops"}
	for _, m := range []string{"/hermes.tools.v1.ToolService/RegisterTool", "/hermes.mcpgateway.v1.MCPGatewayService/AddServer", "/hermes.memory.v1.MemoryService/RunMaintenance", "/hermes.memory.v1.MemoryService/ForgetUser"} {
		if err := a.Authorize(ops, m, nil); err != nil {
			t.Errorf("an operator may not call %s: %v", m, err)
		}
	}
	if err := a.Authorize(Principal{Role: RoleService, Name: "service:x"}, "/hermes.mcpgateway.v1.MCPGatewayService/AddServer", nil); err == nil {
		t.Error("a service may add MCP servers; only operators may")
	}
}

// TestHealthNeedsNoKey: probes and load balancers carry no credentials; with keys configured a
// health check still answers while every other call needs a key.
func TestHealthNeedsNoKey(t *testing.T) {
	k, err := LoadKeyFile(writeKeys(t, "sk-alice-0123456789abcdef: alice\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := New(k, nil)
	if _, err := a.check(context.Background(), "/grpc.health.v1.Health/Check", nil); err != nil {
		t.Errorf("health check without a key: %v", err)
	}
	if _, err := a.check(context.Background(), "/hermes.session.v1.SessionService/ListSessions", nil); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ListSessions without a key: %v, want UNAUTHENTICATED", err)
	}
}

func writeKeys(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUserConnectsOnlyOwnAccount: the per-user MCP connection RPCs are scoped to the caller's own
// user id, so Alice can neither start Bob's connection (and bind his account to her link) nor
// end it.
func TestUserConnectsOnlyOwnAccount(t *testing.T) {
	a := New(nil, nil)
	alice := Principal{Role: RoleUser, User: "alice", Name: "user:alice"}
	for _, tc := range []struct {
		method string
		req    func(user string) proto.Message
	}{
		{mcpgatewayv1.MCPGatewayService_ConnectServer_FullMethodName, func(u string) proto.Message {
			return &mcpgatewayv1.ConnectServerRequest{Server: "tracker", UserId: u}
		}},
		{mcpgatewayv1.MCPGatewayService_DisconnectServer_FullMethodName, func(u string) proto.Message {
			return &mcpgatewayv1.DisconnectServerRequest{Server: "tracker", UserId: u}
		}},
	} {
		if err := a.Authorize(alice, tc.method, tc.req("bob")); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s for another user: %v, want PERMISSION_DENIED", tc.method, err)
		}
		if err := a.Authorize(alice, tc.method, tc.req("alice")); err != nil {
			t.Errorf("%s for herself: %v", tc.method, err)
		}
	}
}

// TestMCPEndpointActsForOwnUser: by default the MCP endpoint is ExecuteTool's (operators and
// services, naming the user; a user key is refused, attack 7); with the operator's
// --mcpgateway.mcp-user-keys it takes every principal, a user key as its own user only (an
// empty name becomes that user, another user is refused), an operator or a service for the
// user it names, as with every user-scoped RPC.
func TestMCPEndpointActsForOwnUser(t *testing.T) {
	a := New(nil, nil)
	alice := Principal{Role: RoleUser, User: "alice", Name: "user:alice"}
	ops := Principal{Role: RoleOperator, Name: "operator:ops"}
	svc := Principal{Role: RoleService, Name: "service:x"}
	tests := []struct {
		name     string
		method   string
		p        Principal
		named    string
		wantUser string
		wantCode codes.Code
	}{
		{"default: user, no name", MCPEndpointMethod, alice, "", "", codes.PermissionDenied},
		{"default: user, own name", MCPEndpointMethod, alice, "alice", "", codes.PermissionDenied},
		{"default: operator names a user", MCPEndpointMethod, ops, "bob", "bob", codes.OK},
		{"default: service, no name", MCPEndpointMethod, svc, "", "", codes.OK},
		{"user keys: user, no name", MCPEndpointUsersMethod, alice, "", "alice", codes.OK},
		{"user keys: user, own name", MCPEndpointUsersMethod, alice, "alice", "alice", codes.OK},
		{"user keys: user, another user", MCPEndpointUsersMethod, alice, "bob", "", codes.PermissionDenied},
		{"user keys: operator names a user", MCPEndpointUsersMethod, ops, "bob", "bob", codes.OK},
		{"user keys: service, no name", MCPEndpointUsersMethod, svc, "", "", codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &toolsv1.ExecuteToolRequest{UserId: tt.named}
			err := a.Authorize(tt.p, tt.method, req)
			if status.Code(err) != tt.wantCode {
				t.Fatalf("Authorize: %v, want %v", err, tt.wantCode)
			}
			if err == nil && req.GetUserId() != tt.wantUser {
				t.Errorf("acts for %q, want %q", req.GetUserId(), tt.wantUser)
			}
		})
	}
}
