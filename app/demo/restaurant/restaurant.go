// Package restaurant is a small MCP server for the demo and the end-to-end tests: a local-life
// service offering search_restaurant and make_reservation, the two tools of the article's
// restaurant example. It is a real MCP server (github.com/modelcontextprotocol/go-sdk) served
// over Streamable HTTP on a loopback port, with a fixed list of restaurants and reservations
// kept in memory.
package restaurant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Restaurant is one entry of the directory.
type Restaurant struct {
	ID      string `json:"restaurant_id"`
	Name    string `json:"restaurant_name"`
	Cuisine string `json:"cuisine"`
	City    string `json:"city"`
	Address string `json:"address"`
	Hours   string `json:"hours"`
}

// directory is the fixed list the server searches.
var directory = []Restaurant{
	{ID: "R-001", Name: "蜀香园", Cuisine: "川菜", City: "北京", Address: "朝阳区建国路 88 号", Hours: "11:00-22:00"},
	{ID: "R-002", Name: "川味轩", Cuisine: "川菜", City: "北京", Address: "海淀区中关村大街 27 号", Hours: "10:30-21:30"},
	{ID: "R-003", Name: "粤海酒家", Cuisine: "粤菜", City: "北京", Address: "东城区王府井大街 138 号", Hours: "11:00-21:00"},
	{ID: "R-004", Name: "湘味小馆", Cuisine: "湘菜", City: "上海", Address: "静安区南京西路 1266 号", Hours: "11:00-23:00"},
}

// Reservation is a booked table.
type Reservation struct {
	ConfirmationID string `json:"confirmation_id"`
	RestaurantID   string `json:"restaurant_id"`
	RestaurantName string `json:"restaurant_name"`
	Time           string `json:"time"`
	PartySize      int    `json:"party_size"`
	Name           string `json:"name,omitempty"`
}

// The tools' contracts, declared explicitly (schema first).
const (
	searchSchema = `{
  "type": "object",
  "properties": {
    "restaurant_name": {"type": "string", "description": "the restaurant's name, for example 蜀香园"},
    "cuisine": {"type": "string", "description": "cuisine, for example 川菜"},
    "city": {"type": "string", "description": "city, for example 北京"}
  },
  "required": ["restaurant_name"],
  "additionalProperties": false
}`
	reserveSchema = `{
  "type": "object",
  "properties": {
    "restaurant_id": {"type": "string", "pattern": "^R-[0-9]{3}$", "description": "the id search_restaurant returned, for example R-001"},
    "time": {"type": "string", "description": "date and time, for example 明天 19:00"},
    "party_size": {"type": "integer", "minimum": 1, "maximum": 20, "description": "number of people"},
    "name": {"type": "string", "description": "name for the booking"}
  },
  "required": ["restaurant_id", "time", "party_size"],
  "additionalProperties": false
}`
)

// Server is the MCP server with its reservations.
type Server struct {
	mcp *mcp.Server

	mu           sync.Mutex // guards reservations
	reservations []Reservation
}

// newServer builds the MCP server.
func newServer() *Server {
	s := &Server{mcp: mcp.NewServer(&mcp.Implementation{Name: "hermes-demo-locallife", Version: "1.0.0"}, nil)}
	s.mcp.AddTool(&mcp.Tool{
		Name:        "search_restaurant",
		Description: "Search the local-life directory for a restaurant by name (and optionally cuisine and city). Returns matching restaurants with their restaurant_id, address and opening hours.",
		InputSchema: json.RawMessage(searchSchema),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, Title: "Search restaurants"},
	}, s.search)
	s.mcp.AddTool(&mcp.Tool{
		Name:        "make_reservation",
		Description: "Book a table at a restaurant found with search_restaurant. Returns the confirmation.",
		InputSchema: json.RawMessage(reserveSchema),
		Annotations: &mcp.ToolAnnotations{Title: "Make a reservation"},
	}, s.reserve)
	return s
}

// Reservations returns the tables booked so far.
func (s *Server) Reservations() []Reservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Reservation(nil), s.reservations...)
}

func textResult(v any) *mcp.CallToolResult {
	b, _ := json.Marshal(v)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func (s *Server) search(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Name    string `json:"restaurant_name"`
		Cuisine string `json:"cuisine"`
		City    string `json:"city"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
		return errorResult("arguments are not a JSON object: " + err.Error()), nil
	}
	var found []Restaurant
	for _, r := range directory {
		if in.Name != "" && !strings.Contains(r.Name, in.Name) && !strings.Contains(in.Name, r.Name) {
			continue
		}
		if in.Cuisine != "" && !strings.Contains(r.Cuisine, in.Cuisine) && !strings.Contains(in.Cuisine, r.Cuisine) {
			continue
		}
		if in.City != "" && r.City != in.City {
			continue
		}
		found = append(found, r)
	}
	return textResult(map[string]any{"restaurants": found, "count": len(found)}), nil
}

func (s *Server) reserve(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		ID        string `json:"restaurant_id"`
		Time      string `json:"time"`
		PartySize int    `json:"party_size"`
		Name      string `json:"name"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
		return errorResult("arguments do not match the schema: " + err.Error()), nil
	}
	var r *Restaurant
	for i := range directory {
		if directory[i].ID == in.ID {
			r = &directory[i]
		}
	}
	if r == nil {
		return errorResult(fmt.Sprintf("no restaurant has the id %q; call search_restaurant first", in.ID)), nil
	}
	if in.PartySize < 1 || strings.TrimSpace(in.Time) == "" {
		return errorResult("time and a party_size of at least 1 are required"), nil
	}
	s.mu.Lock()
	res := Reservation{
		ConfirmationID: fmt.Sprintf("RSV-%04d", len(s.reservations)+1),
		RestaurantID:   r.ID, RestaurantName: r.Name, Time: in.Time, PartySize: in.PartySize, Name: in.Name,
	}
	s.reservations = append(s.reservations, res)
	s.mu.Unlock()
	return textResult(map[string]any{"status": "confirmed", "reservation": res, "address": r.Address}), nil
}

// HTTPServer serves the MCP server over Streamable HTTP.
type HTTPServer struct {
	*Server
	srv  *http.Server
	lis  net.Listener
	done chan struct{}
}

// Listen serves a new server on addr (for example "127.0.0.1:0") at path /mcp.
func Listen(addr string, log *slog.Logger) (*HTTPServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("restaurant MCP server: %w", err)
	}
	s := newServer()
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{Logger: log}))
	h := &HTTPServer{Server: s, lis: lis, done: make(chan struct{}), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("restaurant MCP server", "error", err)
		}
	}()
	return h, nil
}

// URL is the Streamable HTTP endpoint.
func (h *HTTPServer) URL() string { return "http://" + h.lis.Addr().String() + "/mcp" }

// Close stops serving.
func (h *HTTPServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
	_ = h.srv.Close()
	<-h.done
}
