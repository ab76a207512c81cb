package serve

import "time"

// waitABit yields while a test polls for a state the server reaches on its
// own; tests never assert on how long that takes.
func waitABit() { time.Sleep(2 * time.Millisecond) }
