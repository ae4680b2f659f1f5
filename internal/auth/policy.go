package auth

import (
	"fmt"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"

	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// PprofMethod names the profiler (--pprof-listen) in the policy table: it shows the process's
// memory, which holds every user's data, so only operators may use it.
const PprofMethod = "/hermes.debug/Pprof"

// MCPEndpointMethod names Hermes' own MCP endpoint (--mcp-listen) in the policy table. It runs
// tools through ExecuteTool, so by default it is ExecuteTool's: operators and services, acting
// for the user the request names (the X-Hermes-User-Id header), for example a front end that
// authenticates its own users. The request checked is an ExecuteToolRequest whose user_id is
// that header.
const MCPEndpointMethod = "/hermes.mcp/Endpoint"

// MCPEndpointUsersMethod is the MCP endpoint's entry when the operator lets user keys in
// (--mcpgateway.mcp-user-keys): every principal, user-scoped as a user-scoped RPC's user_id — a
// user key acts as its own user only (each user's calls of a per-user OAuth server use that
// user's account), an operator or a service names any user. Off by default: a user key then
// runs any tool directly, without a turn's model in between.
const MCPEndpointUsersMethod = "/hermes.mcp/EndpointUsers"

// Access is the decision for one method.
type Access struct {
	// Public methods need no credentials (health checks, for load balancers and probes).
	Public bool
	// Roles may call the method; nobody else may.
	Roles []Role
	// UserScoped: a user principal acts only for itself. The request's user_id is set to the
	// principal's user when empty and must equal it otherwise (PERMISSION_DENIED). Operators and
	// services name any user. The services check that the session, turn or memory a request
	// names belongs to that user.
	UserScoped bool
	// CheckUser, when set, is an extra check of a user principal's request.
	CheckUser func(req proto.Message) error
}

func (a Access) allows(p Principal) bool {
	if p.Anonymous {
		return true
	}
	for _, r := range a.Roles {
		if r == p.Role {
			return true
		}
	}
	return false
}

var (
	everyone  = []Role{RoleUser, RoleOperator, RoleService}
	privilege = []Role{RoleOperator, RoleService}
	operator  = []Role{RoleOperator}
)

// Policy is the one access table of every RPC of every Hermes service. Each entry says who may
// call the method; a method that is not listed is refused for everyone (policy_test.go fails
// when a registered or declared method has no entry).
func Policy() map[string]Access {
	user := Access{Roles: everyone, UserScoped: true}
	priv := Access{Roles: privilege}
	ops := Access{Roles: operator}
	authenticated := Access{Roles: everyone}
	public := Access{Public: true}
	return map[string]Access{
		// Health is open: probes and load balancers carry no credentials. Reflection describes
		// the API (no data) to any authenticated caller, so grpcurl works with a key.
		healthpb.Health_Check_FullMethodName:                                   public,
		healthpb.Health_Watch_FullMethodName:                                   public,
		healthpb.Health_List_FullMethodName:                                    public,
		reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName:      authenticated,
		reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: authenticated,

		// Sessions: users own theirs. A user appends user, assistant and tool messages, never
		// system messages or summaries (those steer the model for every later turn; they come
		// from the orchestrator or an operator).
		sessionv1.SessionService_CreateSession_FullMethodName:  user,
		sessionv1.SessionService_GetSession_FullMethodName:     user,
		sessionv1.SessionService_ListSessions_FullMethodName:   user,
		sessionv1.SessionService_DeleteSession_FullMethodName:  user,
		sessionv1.SessionService_AppendMessages_FullMethodName: {Roles: everyone, UserScoped: true, CheckUser: checkUserMessages},
		sessionv1.SessionService_ListMessages_FullMethodName:   user,
		sessionv1.SessionService_BuildContext_FullMethodName:   user,
		sessionv1.SessionService_UpdateSummary_FullMethodName:  priv,
		sessionv1.SessionService_SearchMessages_FullMethodName: user,

		// Tools: users see the tools they may use; running tools directly is for the
		// orchestrator and operators (a user runs tools for itself through turns, or through
		// Hermes' MCP endpoint where the operator allows it: MCPEndpointUsersMethod below). Operators change the registry, and so
		// does the MCP gateway for the tools it discovers (the tool service keeps each name to
		// its source).
		toolsv1.ToolService_RegisterTool_FullMethodName:      priv,
		toolsv1.ToolService_UnregisterTool_FullMethodName:    priv,
		toolsv1.ToolService_GetTool_FullMethodName:           authenticated,
		toolsv1.ToolService_ListTools_FullMethodName:         authenticated,
		toolsv1.ToolService_ExecuteTool_FullMethodName:       priv,
		toolsv1.ToolService_ExecuteToolStream_FullMethodName: priv,
		toolsv1.ToolService_SelectTools_FullMethodName:       authenticated,

		// MCP servers run code and reach other hosts: operators manage them; the tool service
		// calls them.
		mcpgatewayv1.MCPGatewayService_AddServer_FullMethodName:         ops,
		mcpgatewayv1.MCPGatewayService_RemoveServer_FullMethodName:      ops,
		mcpgatewayv1.MCPGatewayService_ListServers_FullMethodName:       priv,
		mcpgatewayv1.MCPGatewayService_AnswerElicitation_FullMethodName: priv,
		// A server's sampling request reaches the caller of its call (Hermes' MCP endpoint, a
		// service); the answer goes to the server as its model's completion.
		mcpgatewayv1.MCPGatewayService_AnswerSampling_FullMethodName:        priv,
		mcpgatewayv1.MCPGatewayService_ListTools_FullMethodName:             priv,
		mcpgatewayv1.MCPGatewayService_CallTool_FullMethodName:              priv,
		mcpgatewayv1.MCPGatewayService_CallToolStream_FullMethodName:        priv,
		mcpgatewayv1.MCPGatewayService_ListResourceTemplates_FullMethodName: priv,
		mcpgatewayv1.MCPGatewayService_WatchResource_FullMethodName:         priv,
		mcpgatewayv1.MCPGatewayService_Complete_FullMethodName:              priv,
		mcpgatewayv1.MCPGatewayService_ListResources_FullMethodName:         priv,
		mcpgatewayv1.MCPGatewayService_ReadResource_FullMethodName:          priv,
		mcpgatewayv1.MCPGatewayService_ListPrompts_FullMethodName:           priv,
		mcpgatewayv1.MCPGatewayService_GetPrompt_FullMethodName:             priv,
		// Each user connects and disconnects their own accounts on servers with per-user OAuth.
		// The OAuth redirect carries no key: the single-use state bound to the user is the proof.
		mcpgatewayv1.MCPGatewayService_ConnectServer_FullMethodName:         user,
		mcpgatewayv1.MCPGatewayService_DisconnectServer_FullMethodName:      user,
		mcpgatewayv1.MCPGatewayService_CompleteAuthorization_FullMethodName: public,

		// Memory: users read, add and forget their own (ForgetUser erases all of it); extraction,
		// behaviour counters and maintenance run inside Hermes or by an operator.
		memoryv1.MemoryService_Remember_FullMethodName:       user,
		memoryv1.MemoryService_Recall_FullMethodName:         user,
		memoryv1.MemoryService_ListMemories_FullMethodName:   user,
		memoryv1.MemoryService_Forget_FullMethodName:         user,
		memoryv1.MemoryService_ForgetUser_FullMethodName:     user,
		memoryv1.MemoryService_ExtractTurn_FullMethodName:    priv,
		memoryv1.MemoryService_RecordBehavior_FullMethodName: priv,
		memoryv1.MemoryService_RunMaintenance_FullMethodName: priv,

		PprofMethod: ops,
		// The MCP endpoint runs tools, ExecuteTool's power: operators and services by default;
		// with --mcpgateway.mcp-user-keys every principal, each user as itself (a person's MCP
		// client, an IDE or a desktop app, runs the tools a turn would run for them).
		MCPEndpointMethod:      priv,
		MCPEndpointUsersMethod: user,

		// Turns: users run and control their own.
		orchestratorv1.OrchestratorService_RunTurn_FullMethodName:           user,
		orchestratorv1.OrchestratorService_GetTurn_FullMethodName:           user,
		orchestratorv1.OrchestratorService_ListTurns_FullMethodName:         user,
		orchestratorv1.OrchestratorService_CancelTurn_FullMethodName:        user,
		orchestratorv1.OrchestratorService_AnswerElicitation_FullMethodName: user,
	}
}

// checkUserMessages refuses system messages and summaries from a user principal.
func checkUserMessages(req proto.Message) error {
	r, ok := req.(*sessionv1.AppendMessagesRequest)
	if !ok {
		return fmt.Errorf("unexpected request %T", req)
	}
	for i, m := range r.GetMessages() {
		if m.GetRole() == sessionv1.Role_ROLE_SYSTEM {
			return fmt.Errorf("messages[%d]: a user may not append system messages", i)
		}
		if m.GetKind() == sessionv1.MessageKind_MESSAGE_KIND_SUMMARY {
			return fmt.Errorf("messages[%d]: a user may not append summaries", i)
		}
	}
	return nil
}
