// Package lend lends sandboxes to environments. An environment is lent one
// sandbox per episode and reaches it only through calls on a Unix socket
// (frames of rlhostpb.LentCall and LentReply), never through its backend.
//
// The vocabulary, from the sandbox outwards:
//
//   - A core.Sandbox is one sandbox bound to its id. A Bound makes one of a
//     backend's sandbox: it puts the sandbox block's exec timeout into every
//     request that names none, and counts its execs into a Usage.
//   - A Socket lends sandboxes: Lend puts one on a Loan, and the socket
//     answers calls on a sandbox only while it is on loan, until Release.
//     The host has one Socket per env plugin process and lends each
//     episode's sandbox for the episode; a backend plugin has one for all
//     its sandboxes, lent from Create to Destroy, where each call must
//     carry its loan's token.
//   - A Lease is what a backend that lends a sandbox itself hands the host:
//     its socket's path and the loan's token. A sandbox that carries one is
//     Leased: its environment is sent to the backend's socket, and the
//     host relays nothing. A Lender is such a backend as the host sees it;
//     LenderOf makes any backend one (lending nothing when it cannot).
//   - The environment's end: Dial a socket for a Conn, which every episode
//     lent there shares, and Borrow a sandbox on it.
//
// It deliberately knows nothing of plugin processes or gRPC: envplugin and
// sandboxplugin lend through it, and plugin authors do not import it.
package lend
