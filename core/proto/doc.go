// Package rlhostpb is the rlhost plugin protocol: the generated gRPC code for
// rlhost.proto, plus the conversions between its messages and the core types
// and the mapping of core's sentinel errors onto gRPC statuses. Regenerate
// the code with `make proto`; never edit the *.pb.go files by hand.
package rlhostpb
