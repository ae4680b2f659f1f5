package endpoint

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestServiceError: the tool service's failure reads back by class (rpc.ClassOf) into what the
// MCP client is told about whether the tool ran.
func TestServiceError(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{status.Error(codes.Unavailable, "no connection"), "is unavailable (no connection); the tool may not have run"},
		{status.Error(codes.DeadlineExceeded, "slow"), "ended before it answered (slow); the tool may have run"},
		{status.Error(codes.Canceled, "gone"), "ended before it answered (gone)"},
		{status.Error(codes.Internal, "bug"), "failed (Internal): bug"},
	}
	for _, tt := range tests {
		r := serviceError(tt.err)
		text := r.Content[0].(*mcp.TextContent).Text
		if !r.IsError || !strings.Contains(text, tt.want) {
			t.Errorf("serviceError(%v) = %q (error %v), want it to say %q", tt.err, text, r.IsError, tt.want)
		}
	}
}
