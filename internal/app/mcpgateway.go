package app

import "context"

// initMCPGateway registers the mcpgateway service. It registers nothing until the service is implemented: a
// target never answers with made-up data.
func (a *App) initMCPGateway(ctx context.Context) error {
	return nil
}
