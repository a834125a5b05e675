#!/usr/bin/env bash
# Cold start, as a newcomer meets it: a fresh clone on a machine with none of the
# project's images and no build cache, `scripts/up` to the first finished run and to
# the demo done; then warm `scripts/up --no-demo` (images built) to the first finished
# run of one 10 s TAT run, submitted as soon as its node (se-02) is online, as the demo
# does on each node.
#
#   bench/cold_start.sh [--warm-only] [REF]
#                                 REF: the commit to measure (default HEAD); run it for
#                                 the starting commit too, in the same session, for the
#                                 baseline. --warm-only: only the warm start (REF's
#                                 images are built first, untimed; nothing is removed)
#
# DESTRUCTIVE for the machine's Docker state: it stops the stack (and deletes its
# volumes), removes the project's images (testbed/*, the experiments' images and the
# base image debian:bookworm-slim when nothing else uses it) and prunes the build cache.
# Run it where nobody else uses the project's images, or under the machine's shared
# lock. What stays warm and is said in the report: the host's pip and cargo download
# caches (the packages themselves are fetched from them, not from the network), unless
# FRESH_CACHES=1 (then both start empty, as on a new machine).
#
# Output: the timestamped log of each scripts/up (seconds since its start, one line
# each) and the fresh start's image build logs (fresh-build-logs-REF/) under
# build/bench/, and a table on stdout. Nothing is left running; the images
# of REF stay built.
set -euo pipefail
. "$(dirname "$0")/../scripts/lib.sh"
warm_only=0
if [ "${1:-}" = --warm-only ]; then warm_only=1; shift; fi
ref="${1:-HEAD}"
out="$REPO/build/bench"
mkdir -p "$out"
sha="$(git -C "$REPO" rev-parse --short "$ref")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q --no-checkout "$REPO" "$work/testbed"
git -C "$work/testbed" checkout -q "$sha"
clone="$work/testbed"

stamp() {  # stamp T0 < lines: prefix each line with seconds since T0
    local t0="$1" line
    while IFS= read -r line; do
        printf '%7.1f  %s\n' "$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{print e-s}')" "$line"
    done
}
admin() {  # admin ARGS...: the clone's testbed CLI in the orchestrator, as administrator
    local token
    token="$(sed -n 's/^TESTBED_ADMIN_TOKEN=//p' "$clone/deploy/.secrets/compose.env")"
    docker exec -e TESTBED_URL=http://127.0.0.1:8080 -e "TESTBED_TOKEN=$token" \
        testbed-orchestrator testbed "$@"
}
# The warm start's client: one Python process on the host speaking to the stack's port
# (urllib; no `docker exec`, no CLI start), from scripts/up's start to the run's end. It
# waits for scripts/up to write the admin token, polls se-02 every 0.1 s until it is
# online with its interfaces, submits at once, and polls the run every 0.2 s until it
# is final. (A python3 started per poll, as before 2026-11-28, took 0.3-0.5 s a poll
# while the fleet started, and a second to see se-02 online and submit.) Each poll costs
# a few milliseconds of CPU, little of the start it measures.
# Prints "ONLINE_EPOCH RUN_ID DONE_EPOCH"; exits 1 when scripts/up (pid UP_PID) ends
# before se-02 is online.
first_run() {  # first_run ENV_FILE UP_PID
    python3 - "$1" "$2" "$URL" <<'PY'
import json, os, sys, time, urllib.request
env_file, up_pid, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def alive():
    try:
        os.kill(up_pid, 0)
        return True
    except OSError:
        return False
token = None
while token is None:
    try:
        token = next((line.split("=", 1)[1].strip() for line in open(env_file)
                      if line.startswith("TESTBED_ADMIN_TOKEN=")), None)
    except OSError:
        pass
    if token is None:
        if not alive():
            sys.exit("scripts/up ended before it wrote the admin token")
        time.sleep(0.1)
def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=5))
while True:  # se-02 online with its interfaces
    try:
        n = call("GET", "/api/v1/nodes/se-02")
        if n["health"] == "online" and n["interfaces"]:
            break
    except (OSError, ValueError):
        pass
    if not alive():
        sys.exit("scripts/up --no-demo ended, se-02 not online")
    time.sleep(0.1)
online = time.time()
run = call("POST", "/api/v1/runs", {"experiment": "tat", "node": "se-02", "interface": "op0",
                                    "parameters": {"duration_s": 10}})["id"]
end = time.monotonic() + 300
while time.monotonic() < end:
    if call("GET", "/api/v1/runs/" + run)["state"] in ("done", "failed", "cancelled", "expired"):
        break
    time.sleep(0.2)
print(f"{online:.3f} {run} {time.time():.3f}")
PY
}
first_done() {  # first_done T0: seconds from T0 (epoch) to the earliest run's done event
    local token
    token="$(sed -n 's/^TESTBED_ADMIN_TOKEN=//p' "$clone/deploy/.secrets/compose.env")"
    docker exec -i -e "T=$token" testbed-orchestrator python3 - "$1" <<'PY'
import json, os, sys, urllib.request
from datetime import datetime
def get(path):
    req = urllib.request.Request("http://127.0.0.1:8080" + path,
                                 headers={"Authorization": "Bearer " + os.environ["T"]})
    return json.load(urllib.request.urlopen(req, timeout=10))
ends = [datetime.fromisoformat(e["at"]).timestamp()
        for r in get("/api/v1/runs") for e in get(f"/api/v1/runs/{r['id']}")["events"]
        if e["state"] == "done"]
print(f"{min(ends) - float(sys.argv[1]):.1f}" if ends else "none")
PY
}

echo "== $sha: load before: $(uptime | sed 's/.*load average/load average/')"
fresh_env=()
if [ "$warm_only" = 1 ]; then
    (cd "$clone" && scripts/build-images.sh) >"$out/build-$sha.log" 2>&1 \
        || die "building the images of $sha failed (log: $out/build-$sha.log)"
    t0=$(date +%s.%N); t_demo=$t0; first=skipped; load_fresh=-
else
# ---- fresh machine ---------------------------------------------------------------
"$REPO/scripts/down" --volumes >/dev/null 2>&1 || true
images="$(docker images --format '{{.Repository}}:{{.Tag}}' --filter 'reference=testbed/*')"
for manifest in "$clone"/experiments/*/experiment.yaml; do
    images="$images $(sed -n -E 's/^image:[[:space:]]*["'\'']?([^"'\''[:space:]#]+).*$/\1/p' "$manifest" | head -n1)"
done
images="$images testbed/base:dev testbed/python:dev testbed/tools:dev debian:bookworm-slim"
for image in $images; do
    docker image inspect "$image" >/dev/null 2>&1 || continue
    docker rmi "$image" >/dev/null 2>&1 || echo "note: $image is in use elsewhere; kept"
done
docker builder prune -af >/dev/null 2>&1 || true
docker image prune -f >/dev/null 2>&1 || true

# FRESH_CACHES=1: empty download caches too, as on a new machine (cargo's registry in a
# CARGO_HOME of its own, pip's cache in a folder of its own): every crate and wheel then
# comes from the network. The warm part below uses the same caches, as a second start on
# that machine would (another CARGO_HOME would rebuild the tools).
if [ "${FRESH_CACHES:-0}" = 1 ]; then
    mkdir -p "$work/cargo-home" "$work/pip-cache" "$work/uv-cache"
    fresh_env=(CARGO_HOME="$work/cargo-home" PIP_CACHE_DIR="$work/pip-cache" UV_CACHE_DIR="$work/uv-cache")
    echo "== empty download caches (cargo, pip)"
fi
t0=$(date +%s.%N)
status=0
(cd "$clone" && env "${fresh_env[@]}" scripts/up) > >(stamp "$t0" >"$out/fresh-$sha.log") 2>&1 || status=$?
t_demo=$(date +%s.%N)
# Each image's build log (every line stamped with its epoch time): where the critical
# path spent its time, layer by layer.
rm -rf "$out/fresh-build-logs-$sha"
cp -r "$clone/build/logs" "$out/fresh-build-logs-$sha" 2>/dev/null || true
sleep 1
first=$(first_done "$t0" || echo "?")
load_fresh="$(uptime | sed 's/.*load average: //')"
[ "$status" = 0 ] || echo "note: scripts/up exited $status (log: $out/fresh-$sha.log)"
fi

# ---- warm compose up ---------------------------------------------------------------
(cd "$clone" && scripts/down --volumes) >/dev/null 2>&1
"$REPO/scripts/down" --volumes >/dev/null 2>&1 || true
# The run is submitted as soon as se-02 is online (as the demo does on each node), while
# scripts/up goes on (the other nodes, monitoring); its end is reported too.
t1=$(date +%s.%N)
# Each container's creation, start and health changes in the warm start, seconds since
# its start: where the time before the first run goes. (Followed live: the engine keeps
# only its last 256 events, and the health checks' execs fill that within seconds.)
docker events --filter type=container --filter event=create --filter event=start \
    --filter event=health_status --filter event=die \
    --format '{{.TimeNano}} {{.Action}} {{.Actor.Attributes.name}}' >"$work/events" &
events_pid=$!
# Whatever ends the bench ends the watcher too: left running, it held the caller's lock.
trap 'kill "$events_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
(cd "$clone" && env "${fresh_env[@]}" scripts/up --no-demo) > >(stamp "$t1" >"$out/warm-$sha.log") 2>&1 &
up_pid=$!
read -r t_online run t_warm < <(first_run "$clone/deploy/.secrets/compose.env" "$up_pid") \
    || { wait "$up_pid" || true; echo "error: no first run (log: $out/warm-$sha.log)" >&2; exit 1; }
wait "$up_pid" || echo "note: scripts/up --no-demo exited non-zero (log: $out/warm-$sha.log)"
t_up=$(date +%s.%N)
kill "$events_pid" 2>/dev/null || true
awk -v t1="$t1" '{printf "%7.1f  %s\n", $1/1e9 - t1, substr($0, index($0, $2))}' "$work/events" \
    >"$out/warm-events-$sha.log"
# The running phase (the baseline), and when the run became done by its own record
# (the wall time above is up to 0.2 s later: the poll).
read -r transfer t_warm_event < <(admin --json run show "$run" | python3 -c '
import json, sys
from datetime import UTC, datetime
def at(text):
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=UTC)
ev = {e["state"]: at(e["at"]) for e in json.load(sys.stdin)["events"]}
print((ev["uploading"] - ev["running"]).total_seconds(), ev["done"].timestamp())')
load_warm="$(uptime | sed 's/.*load average: //')"
# Finer than the containers' events: the first replica's and se-02's own log lines and
# the run's state changes, each in seconds since scripts/up started (build/bench/).
{
    for c in testbed-orchestrator testbed-postgres testbed-node-se-02; do
        docker logs -t "$c" 2>&1 | sed "s/^\([^ ]*\) /\1 $c: /"
    done
    admin --json run show "$run" | python3 -c '
import json, sys
for e in json.load(sys.stdin)["events"]:
    print(e["at"], "run:", e["state"])'
} | python3 -c '
import re, sys
from datetime import UTC, datetime
t1, rows = float(sys.argv[1]), []
for line in sys.stdin:
    stamp, _, rest = line.rstrip("\n").partition(" ")
    # docker logs -t: nanoseconds and Z; the run events: microseconds, maybe no zone
    m = re.fullmatch(r"([0-9T:-]+)(?:\.([0-9]+))?(Z|[+-][0-9:]+)?", stamp)
    if not m:
        continue
    at = datetime.fromisoformat(m[1] + "." + (m[2] or "0").ljust(6, "0")[:6])
    at = at.replace(tzinfo=UTC) if m[3] in (None, "Z", "+00:00") else at
    rows.append((at.timestamp() - t1, rest))
for t, rest in sorted(rows):
    print(f"{t:7.2f}  {rest}")' "$t1" >"$out/warm-logs-$sha.log" 2>/dev/null || true
(cd "$clone" && scripts/down --volumes) >/dev/null 2>&1

python3 - "$sha" "$t0" "$t_demo" "$first" "$t1" "$t_online" "$t_warm" "$transfer" \
    "$load_fresh" "$load_warm" "$t_warm_event" "$t_up" <<'PY'
import sys
sha, t0, demo, first, t1, online, warm, transfer, load_fresh, load_warm, event, up = sys.argv[1:]
t0, demo, t1, online, warm, transfer, event, up = map(
    float, (t0, demo, t1, online, warm, transfer, event, up))
print(f"commit {sha}")
print(f"fresh machine -> first finished run        {first:>7} s")
print(f"fresh machine -> demo done                 {demo - t0:7.1f} s   (load after: {load_fresh})")
print(f"warm up --no-demo -> se-02 online          {online - t1:7.1f} s")
print(f"warm up --no-demo -> first finished run    {warm - t1:7.1f} s   (load after: {load_warm})")
print(f"  the same, by the run's done event         {event - t1:7.1f} s")
print(f"baseline: that run's running phase         {transfer:7.1f} s")
print(f"warm up --no-demo -> its end (every node, monitoring) {up - t1:5.1f} s")
PY
echo "logs: $out/fresh-$sha.log $out/warm-$sha.log $out/warm-events-$sha.log $out/warm-logs-$sha.log"
