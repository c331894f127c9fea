// Package testkit holds what the module's tests share: whether the race
// detector is on, a wait for a condition another process makes true, and
// the mock provider on loopback. It is imported by tests only; under
// internal/, nothing outside the module can import it.
//
// It is not a place for assertions or fixtures of one package's own: a
// helper belongs here when the same one stands, copied, in the tests of
// several packages.
package testkit
