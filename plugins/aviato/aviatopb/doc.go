// Package aviatopb is the generated Go code of the Aviato API
// (coreweave.aviato.v1beta1), from the definitions in plugins/aviato/proto.
// Regenerate it with `make proto-aviato`; never edit the *.pb.go files by
// hand. It holds nothing of rlhost's own: the backend and the fake build
// on it.
package aviatopb
