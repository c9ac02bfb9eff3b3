#!/usr/bin/env bash
# Regenerates the Python modules for proto/stepahead_proto/*.proto in place.
set -euo pipefail
cd "$(dirname "$0")"
python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. stepahead_proto/*.proto
