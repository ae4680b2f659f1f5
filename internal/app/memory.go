package app

import "context"

// initMemory registers the memory service. It registers nothing until the service is implemented: a
// target never answers with made-up data.
func (a *App) initMemory(ctx context.Context) error {
	return nil
}
