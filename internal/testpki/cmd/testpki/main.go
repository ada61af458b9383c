// Command testpki writes the certificates of the clients' TLS tests into
// the folder it is given, for `npm test` in clients/typescript, which runs
// outside go test and so cannot call testpki.New itself.
package main

import (
	"fmt"
	"os"

	"github.com/progressdb/progressdb/internal/testpki"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: testpki FOLDER")
		os.Exit(2)
	}
	if err := os.MkdirAll(os.Args[1], 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := testpki.New(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
