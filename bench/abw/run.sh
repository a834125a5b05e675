#!/usr/bin/env bash
# Accuracy bench of the abw estimator: sender and receiver namespaces joined
# through a middle namespace; the sender's veth is shaped with tbf (the
# bottleneck), the middle one adds RTT with linkem (tools/linkem) where a
# condition asks for it; cross traffic of known rate goes through the same
# bottleneck, ground truth from the cross traffic delivered at the receiver.
# Needs root (netns, tc, TUN).
#   bench/abw/run.sh --short        CI-sized run (< ~3 min)
#   bench/abw/run.sh                full grid; writes bench/abw/RESULTS.md
#   bench/abw/run.sh --help         all options
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [[ "${ABW_SKIP_BUILD:-0}" != 1 ]]; then
  (cd "$root/tools" && cargo build --release -p abw --bins -p linkem --bin linkem >&2)
fi
py="$(command -v python3.11 || command -v python3)"
exec "$py" "$here/bench.py" --bin-dir "$root/tools/target/release" "$@"
