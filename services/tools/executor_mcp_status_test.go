package tools

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/errclass"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestMCPStatusError: the gateway's failure reads back by class (rpc.ClassOf) into the tool
// error a model sees and whether the call is retried.
func TestMCPStatusError(t *testing.T) {
	type got struct {
		Code       toolsv1.ErrorCode
		Transient  bool
		MayHaveRun bool
		Msg        string
	}
	tests := []struct {
		name string
		err  error
		want got
	}{
		{"unavailable", status.Error(codes.Unavailable, "no connection"), got{toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, true, false, "the MCP gateway is unavailable: no connection"}},
		{"stream ended", errclass.New(errclass.Unavailable, "the MCP gateway ended the call without a result", nil), got{toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, true, false, "the MCP gateway is unavailable: the MCP gateway ended the call without a result"}},
		{"deadline", status.Error(codes.DeadlineExceeded, "slow"), got{toolsv1.ErrorCode_ERROR_CODE_TIMEOUT, false, true, "the MCP gateway did not answer in time"}},
		{"not found", status.Error(codes.NotFound, "no server"), got{toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, false, false, "the MCP gateway cannot run the tool: no server"}},
		{"precondition", status.Error(codes.FailedPrecondition, "disabled"), got{toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, false, false, "the MCP gateway cannot run the tool: disabled"}},
		{"unimplemented", status.Error(codes.Unimplemented, "not served"), got{toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, false, false, "the MCP gateway cannot run the tool: not served"}},
		{"internal", status.Error(codes.Internal, "bug"), got{toolsv1.ErrorCode_ERROR_CODE_EXECUTION, false, false, "the MCP gateway failed the call (Internal): bug"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := mcpStatusError(tt.err).(*execError)
			if !ok {
				t.Fatalf("mcpStatusError(%v) is not an execError", tt.err)
			}
			if diff := cmp.Diff(tt.want, got{e.code, e.transient, e.mayHaveRun, e.msg}); diff != "" {
				t.Errorf("mcpStatusError(%v) (-want +got):\n%s", tt.err, diff)
			}
		})
	}
}
