package main

import (
	"sync"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/services/memory"
	"github.com/hermes-agent/hermes/services/orchestrator"
)

// modelCounter counts the scripted model's requests by what they are for.
type modelCounter struct {
	mu sync.Mutex
	n  map[string]int
}

var counted = &modelCounter{n: map[string]int{}}

func (m *modelCounter) wrap(h scripted.Handler) scripted.Handler {
	return func(req scripted.Request) scripted.Reply {
		kind := "assistant"
		if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
			switch sys := req.Messages[0].Content; {
			case sys == memory.ExtractionSystemPrompt:
				kind = "extraction"
			case sys == orchestrator.SummarySystemPrompt:
				kind = "summary"
			}
		}
		m.mu.Lock()
		m.n[kind]++
		m.mu.Unlock()
		return h(req)
	}
}

func (m *modelCounter) snapshot() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.n {
		out[k] = v
	}
	return out
}
