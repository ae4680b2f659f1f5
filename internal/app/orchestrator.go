package app

import "context"

// initOrchestrator registers the orchestrator service. It registers nothing until the service is implemented: a
// target never answers with made-up data.
func (a *App) initOrchestrator(ctx context.Context) error {
	return nil
}
