#!/usr/bin/env bash
# Time from `compose up` to the first finished run on the emulated fleet.
#
# Images are built first (not timed: a warm cache is assumed, as on a developer's
# machine), the stack is reset, then timed: start of compose -> every node online ->
# first TAT run (10 s transfer) done. The baseline in the same run is that run's own
# transfer time, so the ratio says how much platform overhead wraps a measurement.
#
#   bench/fleet_startup.sh            (prints a table; keeps nothing running)
set -euo pipefail
. "$(dirname "$0")/../scripts/lib.sh"
cd "$REPO"

scripts/build-images.sh >/dev/null
scripts/down --volumes >/dev/null 2>&1 || true

t0=$(date +%s.%N)
scripts/up --no-demo >/dev/null 2>&1
t_online=$(date +%s.%N)
load_env
run=$(tb --json run submit tat --node se-02 --interface op0 --param duration_s=10 \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
tb run wait "$run" --timeout 300 >/dev/null
t_done=$(date +%s.%N)
transfer=$(tb --json run show "$run" | python3 -c '
import json, sys
from datetime import datetime
ev = {e["state"]: datetime.fromisoformat(e["at"]) for e in json.load(sys.stdin)["events"]}
print((ev["uploading"] - ev["running"]).total_seconds())')
scripts/down --volumes >/dev/null 2>&1

python3 - "$t0" "$t_online" "$t_done" "$transfer" <<'PY'
import sys
t0, online, done, transfer = map(float, sys.argv[1:])
print(f"compose up -> all nodes online      {online - t0:7.1f} s")
print(f"nodes online -> first run done      {done - online:7.1f} s")
print(f"compose up -> first finished run    {done - t0:7.1f} s")
print(f"baseline: the run's running phase   {transfer:7.1f} s")
print(f"ratio (first result / running time) {(done - t0) / transfer:7.2f}")
PY
