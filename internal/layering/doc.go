// Package layering holds the test that keeps sluice's import graph layered:
// programs on top, then the shells (gateway, simulator, load generator,
// mock provider), the admission chain, the policies it runs, and the wire
// contract at the bottom. A package may import only packages of lower
// layers, so a policy never learns about HTTP or virtual time, and neither
// shell can reach into the other. internal/testkit, what the tests share,
// sits just above the shells (it starts the mock provider); only tests
// import it. This package has no code of its own.
package layering
