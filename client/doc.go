// Package client is the Go client of progressdb (spec §13).
//
// client.gen.go is generated from api/openapi.yaml by oapi-codegen
// (`make clients`): the schemas as Go types (timestamps as time.Time,
// exact to the nanosecond) and every operation (Raw, ClientWithResponses).
// The rest is a thin layer written by hand: New with the API key and
// admin token, retries on 503 and 421 that honour Retry-After, listings
// as iter.Seq2 iterators, and errors as *APIError carrying the server's
// code. docs/clients.md shows it in use.
package client
