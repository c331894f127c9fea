package gateway

import (
	"context"
)

// RunAlerts evaluates the spend alerts until ctx ends (Server.Serve runs
// it; a program that mounts the Gateway itself should too). Without a spend
// section it returns at once.
func (g *Gateway) RunAlerts(ctx context.Context) error {
	if g.alerter == nil {
		return nil
	}
	return g.alerter.Run(ctx)
}
