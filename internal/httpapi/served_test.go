package httpapi

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	hermesproto "github.com/hermes-agent/hermes/proto"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// TestServedOpenAPI: the document lists the operations of the services a process serves, less
// the methods it omits (the edge's), and is the generated one where everything is served.
func TestServedOpenAPI(t *testing.T) {
	var all []string
	for _, g := range gateways() {
		all = append(all, g.service)
	}
	if doc, err := servedOpenAPI(hermesproto.OpenAPI, all, nil); err != nil || doc != hermesproto.OpenAPI {
		t.Errorf("every service served: the document changed (%v)", err)
	}

	doc, err := servedOpenAPI(hermesproto.OpenAPI, []string{
		orchestratorv1.OrchestratorService_ServiceDesc.ServiceName,
		sessionv1.SessionService_ServiceDesc.ServiceName,
		memoryv1.MemoryService_ServiceDesc.ServiceName,
	}, []string{
		sessionv1.SessionService_UpdateSummary_FullMethodName,
		memoryv1.MemoryService_ExtractTurn_FullMethodName,
		memoryv1.MemoryService_RecordBehavior_FullMethodName,
		memoryv1.MemoryService_RunMaintenance_FullMethodName,
	})
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
		Tags []struct {
			Name string `json:"name"`
		} `json:"tags"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, item := range d.Paths {
		for _, op := range item {
			ops[op.OperationID] = true
		}
	}
	for _, want := range []string{"SessionService_CreateSession", "SessionService_ListMessages", "OrchestratorService_RunTurn", "MemoryService_Recall", "MemoryService_Forget"} {
		if !ops[want] {
			t.Errorf("%s is not in the document", want)
		}
	}
	for _, not := range []string{"SessionService_UpdateSummary", "MemoryService_RunMaintenance", "MemoryService_ExtractTurn", "ToolService_ListTools", "MCPGatewayService_AddServer"} {
		if ops[not] {
			t.Errorf("%s is in the document although it is not served", not)
		}
	}
	var tags []string
	for _, tg := range d.Tags {
		tags = append(tags, tg.Name)
	}
	slices.Sort(tags)
	if diff := cmp.Diff([]string{"MemoryService", "OrchestratorService", "SessionService"}, tags); diff != "" {
		t.Errorf("tags (-want +got):\n%s", diff)
	}
}
