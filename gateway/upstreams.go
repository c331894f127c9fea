package gateway

import (
	"fmt"

	"github.com/sluicehq/sluice/config"
)

// openDeployments is where calls go (Deployments: the one
// upstream, named "default", or each of upstreams), with each key read
// from its variable (an empty or unset variable is an error naming the
// field).
func openDeployments(cfg config.Config, getenv func(string) string) ([]*deployment, error) {
	specs, err := cfg.Deployments()
	if err != nil {
		return nil, err
	}
	out := make([]*deployment, len(specs))
	for i, sp := range specs {
		d := &deployment{name: sp.Name, url: sp.URL, xAPIKey: sp.AuthHeader == "x-api-key"}
		if sp.APIKeyEnv != "" {
			if d.apiKey = getenv(sp.APIKeyEnv); d.apiKey == "" {
				return nil, fmt.Errorf("config: %s: the environment variable %s is empty or unset", sp.KeyField, sp.APIKeyEnv)
			}
		}
		out[i] = d
	}
	return out, nil
}
