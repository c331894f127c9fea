package gateway

// TEMPORARY: replaced by the cfg branch at merge.

import (
	"net/url"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/chain"
)

func (c Config) routingConfig(base admission.Config) (*chain.RoutingConfig, error) { return nil, nil }

func (c Config) openDeployments(getenv func(string) string) ([]*deployment, error) {
	up, _ := url.Parse(c.Upstream.URL)
	d := &deployment{name: defaultDeployment, url: up, xAPIKey: c.Upstream.AuthHeader == "x-api-key"}
	if c.Upstream.APIKeyEnv != "" {
		d.apiKey = getenv(c.Upstream.APIKeyEnv)
		if d.apiKey == "" {
			return nil, errorf("upstream.api_key_env: the environment variable %s is empty or unset", c.Upstream.APIKeyEnv)
		}
	}
	return []*deployment{d}, nil
}
