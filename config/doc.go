// Package config is sluice's configuration file: its schema (Config and
// the sections it holds), the defaults of every key (WithDefaults), its
// validation, whose every error names the key by its YAML path (Validate,
// through package yamlpath), and the admission chain it describes (Chain,
// Routing, SpendConfig). Load and Parse are the one loader: `sluice serve`
// and `sluice check-config` read a file through it, and the gateway is
// built from what it returns.
//
// Each section's type is its package's own, and validates itself: the
// tenants (chain.TenantConfig), the retries and their recognition
// (chain.RetryConfig), degrading under load (chain.DegradeConfig), the
// spend section (spend.Config), the connection guard (guard.Config), the
// Batch API (batchapi.Config), Idempotency-Key (idempotency.Config), the
// logs (observe.LogConfig). What is left here is what only the file as a
// whole knows: the upstream or upstreams and their pools, the gate's
// section, classes and ranks, limits, the store, and the checks across
// sections (a tenant's classes among the classes, the ladder's models
// among the pools', the spend section's tenants among the tenants). The
// simulator's scenario files hold the same section types (package
// sim/scenario).
//
// docs/configuration.md documents every key once; a test holds it to the
// schema found here by reflection.
package config
