package rpc

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// recordingListener keeps a copy of what its connections' peers sent (in) and what the server
// wrote back (out).
type recordingListener struct {
	net.Listener
	mu      sync.Mutex // guards in and out
	in, out bytes.Buffer
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, l: l}, nil
}

type recordingConn struct {
	net.Conn
	l *recordingListener
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.record(&c.l.in, p[:n])
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.record(&c.l.out, p[:n])
	return n, err
}

// record appends p to one direction's recording under the listener's lock.
func (c *recordingConn) record(to *bytes.Buffer, p []byte) {
	c.l.mu.Lock()
	to.Write(p)
	c.l.mu.Unlock()
}

// frameCounts counts the HTTP/2 frames of a recorded direction by type; pings that answer a
// ping are counted apart ("PING ACK").
func frameCounts(t *testing.T, raw []byte) map[string]int {
	t.Helper()
	fr := http2.NewFramer(io.Discard, bytes.NewReader(raw))
	counts := map[string]int{}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return counts
		}
		name := f.Header().Type.String()
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			name += " ACK"
		}
		counts[name]++
	}
}

// TestNoFlowControlPings: Hermes' servers and clients use fixed flow-control windows, so a
// series of small calls costs no BDP pings (and their answers) or window updates in either
// direction. With gRPC's dynamic windows each side sent a window update and a ping after nearly
// every message it received (20 of each for 20 calls).
func TestNoFlowControlPings(t *testing.T) {
	var lis *recordingListener
	_, _, conn, cancel, done := startOn(t, ServerOptions{}, func(inner net.Listener) net.Listener {
		lis = &recordingListener{Listener: inner}
		return lis
	})
	ctx := context.Background()
	c := testpb.NewTestServiceClient(conn)
	const calls = 20
	for range calls {
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: bytes.Repeat([]byte("x"), 2000)}}); err != nil {
			t.Fatal(err)
		}
	}
	// Read before the shutdown, whose GOAWAY comes with a ping of its own.
	lis.mu.Lock()
	// The client's connection preface precedes its frames.
	in := bytes.TrimPrefix(lis.in.Bytes(), []byte(http2.ClientPreface))
	fromClient, fromServer := frameCounts(t, in), frameCounts(t, lis.out.Bytes())
	lis.mu.Unlock()
	_ = conn.Close()
	cancel()
	<-done
	if fromClient["HEADERS"] != calls || fromServer["HEADERS"] < calls {
		t.Fatalf("the recording missed calls: %d request and %d response HEADERS frames for %d calls", fromClient["HEADERS"], fromServer["HEADERS"], calls)
	}
	// Each side announces its connection window once, at the start.
	for kind, most := range map[string]int{"PING": 0, "PING ACK": 0, "WINDOW_UPDATE": 1} {
		if fromClient[kind] > most || fromServer[kind] > most {
			t.Errorf("%s frames: %d from the client, %d from the server; want at most %d (client %v, server %v)", kind, fromClient[kind], fromServer[kind], most, fromClient, fromServer)
		}
	}
}
