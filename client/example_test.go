package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hermes-agent/hermes/client"
	"github.com/hermes-agent/hermes/internal/app"
	"github.com/hermes-agent/hermes/internal/demo"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	"github.com/hermes-agent/hermes/services/memory"
	"github.com/hermes-agent/hermes/services/orchestrator"
)

// Example runs one turn against a Hermes started in this process with a scripted model, which
// calls the calculator and answers with its result.
func Example() {
	hermes, err := startHermes(calculatorModel, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer hermes.stop()

	ctx := context.Background()
	c, err := client.Dial(ctx, hermes.addr, client.WithUser("ada"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	s, err := c.CreateSession(ctx, "arithmetic")
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range c.Turn(ctx, s.GetId(), "What is 6 * 7?") {
		if err != nil {
			log.Fatal(err)
		}
		switch e := ev.GetEvent().(type) {
		case *orchestratorv1.TurnEvent_ToolCall:
			fmt.Printf("[%s %s]\n", e.ToolCall.GetName(), e.ToolCall.GetArguments())
		case *orchestratorv1.TurnEvent_Delta:
			fmt.Print(e.Delta.GetText())
		case *orchestratorv1.TurnEvent_Completed:
			fmt.Printf("\n(%d steps)\n", e.Completed.GetSteps())
		}
	}
	// Output:
	// [calculator {"expression":"6 * 7"}]
	// 6 * 7 = 42.
	// (2 steps)
}

// hermes is a monolithic Hermes (all services, embedded stores and NATS) in this process.
type hermes struct {
	addr  string
	model *scripted.Server
	app   *app.App
	dir   string
}

// startHermes starts a scripted model and a Hermes that uses it; configure, when set, changes
// Hermes' configuration (API keys, TLS).
func startHermes(h scripted.Handler, configure func(*app.Config)) (*hermes, error) {
	dir, err := os.MkdirTemp("", "hermes-client-")
	if err != nil {
		return nil, err
	}
	m, err := scripted.New(h)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cfg := demo.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.ModelBaseURL, cfg.Model = m.URL(), "scripted"
	cfg.ShutdownTimeout = 5 * time.Second
	if configure != nil {
		configure(&cfg)
	}
	a, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		m.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	a.Start()
	return &hermes{addr: a.Addr(), model: m, app: a, dir: dir}, nil
}

func (h *hermes) stop() {
	_ = h.app.Stop()
	h.model.Close()
	_ = os.RemoveAll(h.dir)
}

// calculatorModel calls the calculator with the expression of "What is …?" and answers with the
// result; it tells the memory extractor there is nothing to remember and gives the rolling
// summary a fixed one.
func calculatorModel(req scripted.Request) scripted.Reply {
	sys := ""
	if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
		sys = req.Messages[0].Content
	}
	switch {
	case sys == memory.ExtractionSystemPrompt:
		return scripted.Text(`{"memories":[]}`)
	case strings.HasPrefix(sys, orchestrator.SummarySystemPrompt[:40]):
		return scripted.Text(`{"goal":"arithmetic","decisions":[],"facts":[],"open_items":[]}`)
	}
	expr := strings.TrimSuffix(strings.TrimPrefix(req.LastUser(), "What is "), "?")
	if res := req.ToolResults(); len(res) > 0 {
		// Hermes hands the model a tool's result as {"success":true,"output":{…}}.
		var out struct {
			Output struct {
				Result json.Number `json:"result"`
			} `json:"output"`
		}
		if err := json.Unmarshal([]byte(res[len(res)-1].Content), &out); err != nil {
			return scripted.Text("The calculator's answer was unreadable: " + err.Error())
		}
		return scripted.Text(fmt.Sprintf("%s = %s.", expr, out.Output.Result))
	}
	if !req.HasTool("calculator") {
		return scripted.Text("I have no calculator.")
	}
	return scripted.Calls(scripted.Call("calculator", map[string]string{"expression": expr}))
}
