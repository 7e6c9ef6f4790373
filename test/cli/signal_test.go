package cli_test

import "os"

// interruptSignal stops a served `mcp --transport http`.
var interruptSignal = os.Interrupt
