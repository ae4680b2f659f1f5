package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// sideCallResults are tools/call results of every shape the side channel's decoder meets:
// text in English and Chinese, annotations, _meta, structured content, isError, and blocks
// that are not text (decoded by the SDK's own code).
func sideCallResults(r *rand.Rand) []*mcp.CallToolResult {
	words := []string{"weather", "Berlin", "12°C", "天气", "北京", "晴转多云", "气温", "\u200b", "\"quoted\"", "tab\there", "new\nline", "emoji 🌧"}
	text := func() string {
		var b strings.Builder
		for range 1 + r.IntN(12) {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
		return b.String()
	}
	var out []*mcp.CallToolResult
	for range 20 {
		res := &mcp.CallToolResult{IsError: r.IntN(4) == 0}
		for range 1 + r.IntN(3) {
			t := &mcp.TextContent{Text: text()}
			if r.IntN(3) == 0 {
				t.Annotations = &mcp.Annotations{Audience: []mcp.Role{"user"}, Priority: 0.5}
			}
			if r.IntN(3) == 0 {
				t.Meta = mcp.Meta{"source": text()}
			}
			res.Content = append(res.Content, t)
		}
		if r.IntN(3) == 0 {
			res.StructuredContent = map[string]any{"city": text(), "temperature": r.Float64() * 40, "tags": []any{text(), text()}}
		}
		if r.IntN(4) == 0 {
			res.Content = append(res.Content, &mcp.ImageContent{MIMEType: "image/png", Data: []byte(text())})
		}
		if r.IntN(5) == 0 {
			res.Meta = mcp.Meta{"trace": text()}
		}
		out = append(out, res)
	}
	// Results over the caps: the message that names the cap and the true size must not depend
	// on the path.
	big := strings.Repeat("北京的天气 weather ", 12_000) // ~280 KB
	return append(out, &mcp.CallToolResult{Content: []mcp.Content{}}, &mcp.CallToolResult{StructuredContent: map[string]any{"only": "structured"}},
		&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: big}}},
		&mcp.CallToolResult{StructuredContent: map[string]any{"data": big}, Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}})
}

// TestDecodeCallResult checks the side channel's decoder against the SDK's on generated
// results and on wire forms the SDK reads in its own way (field names that differ in case).
func TestDecodeCallResult(t *testing.T) {
	var raws []string
	for _, res := range sideCallResults(rand.New(rand.NewPCG(27, 4))) {
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		raws = append(raws, string(b))
	}
	raws = append(raws,
		`{"content":[{"type":"text","text":"a","Text":"b"}],"IsError":true}`,
		`{"content":[{"TYPE":"image","type":"text","text":"什么"}]}`,
		`{"content":[{"type":"text"}]}`,
		`{}`,
	)
	for _, raw := range raws {
		var want mcp.CallToolResult
		wantErr := json.Unmarshal([]byte(raw), &want)
		got, err := decodeCallResult(json.RawMessage(raw))
		if (err != nil) != (wantErr != nil) {
			t.Errorf("decodeCallResult(%s) error %v, the SDK's %v", raw, err, wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if diff := cmp.Diff(&want, got, cmpopts.IgnoreUnexported(mcp.CallToolResult{})); diff != "" {
			t.Errorf("decodeCallResult(%s) differs from the SDK's decoding (-sdk +side):\n%s", raw, diff)
		}
	}
	deep := strings.Repeat("[", maxResultDepth+1) + strings.Repeat("]", maxResultDepth+1)
	if _, err := decodeCallResult(json.RawMessage(`{"structuredContent":` + deep + `}`)); err == nil {
		t.Error("a result nested deeper than the limit was decoded")
	}
	inString := `{"content":[{"type":"text","text":"` + strings.Repeat("[", 2*maxResultDepth) + `"}]}`
	if _, err := decodeCallResult(json.RawMessage(inString)); err != nil {
		t.Errorf("brackets inside a string count as nesting: %v", err)
	}
}

// TestSideCallHelper is the MCP server of TestStdioCallsOnSideChannel; it does nothing in a
// normal test run. Its tool "result" returns sideCallResults()[i]; "block" waits until it is
// cancelled and then creates the file HERMES_SIDECALL_CANCELLED.
func TestSideCallHelper(t *testing.T) {
	if os.Getenv("HERMES_SIDECALL_MCP") == "" {
		t.Skip("run by the tests as an MCP server")
	}
	results := sideCallResults(rand.New(rand.NewPCG(27, 5)))
	s := mcp.NewServer(&mcp.Implementation{Name: "sidecall", Version: "1"}, nil)
	type pick struct {
		I int `json:"i"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "result", Description: "Returns generated result i."},
		func(_ context.Context, _ *mcp.CallToolRequest, p pick) (*mcp.CallToolResult, any, error) {
			if p.I < 0 || p.I >= len(results) {
				return nil, nil, errors.New("no such result")
			}
			return results[p.I], nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "block", Description: "Blocks until cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			<-ctx.Done()
			_ = os.WriteFile(os.Getenv("HERMES_SIDECALL_CANCELLED"), nil, 0o644)
			return nil, nil, ctx.Err()
		})
	_ = s.Run(context.Background(), &mcp.StdioTransport{})
	os.Exit(0)
}

// TestStdioCallsOnSideChannel calls the same stdio server's tools on the side channel (protocol
// 2025-11-25) and through the SDK (the newest protocol, which stays on the SDK): the normalized
// responses are the same, and a call that times out on the side channel is cancelled on the
// server.
func TestStdioCallsOnSideChannel(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "cancelled")
	spec := func(name, protocol string) *pb.ServerSpec {
		return &pb.ServerSpec{Name: name, ProtocolVersion: protocol, Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{
			Command: self, Args: []string{"-test.run=^TestSideCallHelper$", "-test.count=1"},
			Env: map[string]string{"HERMES_SIDECALL_MCP": "1", "HERMES_SIDECALL_CANCELLED": marker},
		}}}
	}
	c, _ := startGateway(t, testConfig(), Options{})
	side := addReady(t, c, spec("side", "2025-11-25"))
	sdk := addReady(t, c, spec("sdk", ""))
	if side.GetProtocolVersion() != "2025-11-25" || sdk.GetProtocolVersion() < "2026-07-28" {
		t.Fatalf("protocols %q and %q: the test needs one on each path", side.GetProtocolVersion(), sdk.GetProtocolVersion())
	}
	ignore := protocmp.IgnoreFields(&pb.CallToolResponse{}, "duration")
	for i := range sideCallResults(rand.New(rand.NewPCG(27, 5))) {
		args := fmt.Sprintf(`{"i": %d}`, i)
		want, got := call(t, c, "sdk_result", args), call(t, c, "side_result", args)
		if diff := cmp.Diff(want, got, protocmp.Transform(), ignore); diff != "" {
			t.Errorf("result %d: the side channel's response differs from the SDK's (-sdk +side):\n%s", i, diff)
		}
	}
	t.Run("a call that times out is cancelled on the server", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := c.CallTool(ctx, &pb.CallToolRequest{Name: "side_block", Arguments: `{}`, Timeout: callTimeout(300 * time.Millisecond)})
		if err != nil || r.GetErrorCode() != codeTimeout || !r.GetMayHaveRun() {
			t.Fatalf("blocking call = %+v, %v; want error_code timeout, may have run", r, err)
		}
		testenv.WaitFor(t, 10*time.Second, "the server to see the call cancelled", func() bool {
			_, err := os.Stat(marker)
			return err == nil
		})
		if r := call(t, c, "side_result", `{"i": 0}`); r.GetErrorCode() != "" {
			t.Errorf("after the cancelled call: %+v", r)
		}
	})
}
