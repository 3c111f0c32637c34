// Command norn is the Norn task scheduler: server, client CLI, worker runner,
// Kafka delay bridge, benchmarks and migrations. All logic lives in
// internal/cli and the library packages; this main only runs it.
package main

import (
	"os"

	"github.com/nornq/norn/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
