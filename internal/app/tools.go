package app

import "context"

// initTools registers the tools service. It registers nothing until the service is implemented: a
// target never answers with made-up data.
func (a *App) initTools(ctx context.Context) error {
	return nil
}
