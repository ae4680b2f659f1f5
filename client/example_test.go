package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/client"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	"github.com/hermes-agent/hermes/services/memory"
	"github.com/hermes-agent/hermes/services/orchestrator"
	"github.com/hermes-agent/hermes/test/hermestest"
)

// Example runs one turn against a Hermes started in this process with a scripted model, which
// calls the calculator and answers with its result.
func Example() {
	hermes, err := startHermes(calculatorModel, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer hermes.Close()

	ctx := context.Background()
	c, err := client.Dial(ctx, hermes.App.Addr(), client.WithUser("ada"))
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

// startHermes starts a scripted model and a monolithic Hermes that uses it; configure, when
// set, changes Hermes' configuration (API keys, TLS). Close stops both.
func startHermes(h scripted.Handler, configure func(*app.Config)) (*hermestest.Stack, error) {
	return hermestest.New(context.Background(), hermestest.Options{Model: h, ScriptExtractor: true, Args: []string{"--model=scripted"}, Configure: configure})
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
