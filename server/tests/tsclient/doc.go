// Package tsclient runs the suite of the TypeScript client
// (clients/typescript, spec §13) with node's own test runner against real
// servers started from the binary its test builds: `make test` runs it
// through go test, so that a machine with node tests both clients.
package tsclient
