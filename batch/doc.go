// Package batch runs OpenAI-style batch jobs durably: files of requests,
// batches made of them, the state of every item and its result, kept in a
// JobStore that survives a restart and a crash, and an Executor that runs
// the items through a caller-supplied Doer (the gateway's admission chain)
// in the capacity live work leaves idle.
//
// What happened is exact: an item's result is written once (JobStore
// refuses a second), so an output file never says anything twice; an item
// that was claimed when the process died is claimed again after the
// restart, so it runs at most once more per crash.
//
// Files are kept in chunks and move a chunk at a time: StageFile writes
// an upload as it is read, FileContent reads it back, and Validate and
// Requests read an input file a line at a time, so that memory is bounded
// by a chunk and a line, not a file. Purge deletes what is past its time.
//
// The embedded store is Bolt (OpenBolt): one file, pure Go, serialisable
// transactions with an fsync per commit, and a file lock that makes the
// process that opened it the only one running its items. Several replicas
// share one store on Redis Streams instead: store.Jobs.
package batch
