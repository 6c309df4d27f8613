// Command stamp prints version.String(); the version tests build it with
// -ldflags -X to check that the variables can be stamped.
package main

import (
	"fmt"

	"github.com/elector/elector/cmd/elector/internal/version"
)

func main() {
	fmt.Println(version.String())
}
