// Package rlhostpb is the rlhost plugin protocol: the generated gRPC code for
// rlhost.proto, the conversions every plugin kind shares (Describe,
// Configure, diagnostics, valid UTF-8), and the mapping of core's sentinel
// errors onto gRPC statuses. Each kind converts its own messages beside
// itself (core/sdk/envplugin, core/sdk/sandboxplugin); nothing here mirrors a
// kind's types. Regenerate
// the code with `make proto`; never edit the *.pb.go files by hand.
package rlhostpb
