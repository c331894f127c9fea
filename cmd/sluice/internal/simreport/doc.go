// Package simreport renders the simulator's results: the aligned text
// tables of `sluice sim --scenario`, and docs/results.md with its plots,
// which `sluice sim --all --out docs/` regenerates ([Write]).
//
// It reads package sim only through its exported API ([sim.RunSweep],
// [sim.Sweep], [sim.Result]); the simulator knows nothing of how its
// results are shown, and does not import the plotting library.
//
// The prose of results.md is in templates/*.tmpl (text/template, embedded),
// the figures are computed here and handed to the templates as data. A
// sentence whose wording depends on the figures — a finding that holds only
// when its premise does, "never recovers" against "recovers in 3 s" — is a
// conditional in its template, not a string put together in Go, so that
// the prose can be edited in one place and regenerating the file cannot
// leave a claim behind that the numbers no longer support.
//
// It is internal: a program's report, not a library.
package simreport
