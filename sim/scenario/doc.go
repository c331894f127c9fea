// Package scenario is the schema of the simulator's scenario files: the
// workloads package sim plays in virtual time, one YAML file each (the
// repository's are in scenarios/, and docs/results.md tables them).
//
// A scenario file describes the upstream (its slots, a service-time
// distribution that can step mid-run, a price per call, its models), the
// priority classes and their deadlines, the traffic sources (Poisson
// arrivals of one class from one tenant, sent by naive, polite or client
// callers, with rate steps and bursts), the policies to compare and the
// load factors to table, and optionally the gateway's own sections —
// spend (the very spend.Config the gateway decodes), sluice.tenants,
// sluice.retry_budget, sluice.recognise, sluice.degrade — a replicas
// section and the time-series plots wanted. The keys are the snake_case
// names given on each field of [Scenario] and the types it holds, whose
// comments say what each means and what its zero value means; `sluice sim
// --help` lists the policies and clients by name.
//
// [Load] and [Parse] read a file as every sluice configuration is read
// (package internal/yamlpath): an unknown or repeated key is refused with
// the keys that are known, a bare number is not a duration, and every
// error is a [FieldError] naming the field by its YAML path
// ("traffic[1].bursts[0].for"). [Scenario.Validate] checks a scenario
// built in code the same way.
//
// The package is the schema and its validation only; what a run does with
// a scenario is package sim's.
package scenario
