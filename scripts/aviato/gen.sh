#!/bin/bash
# Regenerates the Aviato API definitions and Go stubs of plugins/aviato.
#
#   scripts/aviato/gen.sh CLIENT_CHECKOUT VERSION
#
# CLIENT_CHECKOUT is a checkout (or `git archive`) of
# github.com/coreweave/cwsandbox-client at tag VERSION, one that still ships
# src/cwsandbox/_proto/atc_pb2.py. Needs Debian's python3-protobuf and
# protobuf-compiler, and protoc-gen-go / protoc-gen-go-grpc on PATH.
set -euo pipefail
[ $# -eq 2 ] || { sed -n 2,9p "$0"; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/plugins/aviato/proto
/usr/bin/python3 "$root/scripts/aviato/recover_proto.py" "$1" "$out" "$2"
# The Go stubs go to plugins/aviato/aviatopb, a package named as its folder;
# the definitions stay under proto/ in the API's own package layout.
pkg=github.com/rlhost/rlhost/plugins/aviato/aviatopb
gen=$root/plugins/aviato/aviatopb
files=(coreweave/aviato/v1beta1/atc.proto coreweave/aviato/v1beta1/secrets.proto)
maps=()
for f in "${files[@]}"; do
	maps+=("--go_opt=M$f=$pkg" "--go-grpc_opt=M$f=$pkg")
done
mkdir -p "$gen"
cd "$out"
protoc -I . --go_out="$gen" --go_opt=module=$pkg \
	--go-grpc_out="$gen" --go-grpc_opt=module=$pkg "${maps[@]}" "${files[@]}"
