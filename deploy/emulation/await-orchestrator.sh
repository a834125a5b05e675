#!/bin/bash
# Start the command (the node agent) once the orchestrator answers, or after a while
# anyway: an emulated node's container starts with the control plane, its links set up
# meanwhile (node-links.sh), and its agent's start (a Python process: imports, about a
# second of CPU) then waits for an orchestrator to register with instead of competing
# with the orchestrator's own start on a small machine (bench/RESULTS.md).
#
#   await-orchestrator.sh CMD [ARG...]
#
# Each try is one GET /healthz by bash alone (no process started), every 0.1 s. The
# agent copes with an orchestrator out of contact by itself (it retries registering,
# and runs what it holds), so this only orders the first start: after TESTBED_AWAIT_S
# seconds (default 30) without an answer the command starts anyway, said on stderr,
# and a restarted container (a stopped node started again: its file system kept, the
# mark below with it) does not wait at all.
#
# Environment: TESTBED_AWAIT_ORCHESTRATOR (host:port, default orchestrator:8080, the
# compose stack's front), TESTBED_AWAIT_S, TESTBED_AWAIT_MARK (the mark of a first start
# done, default /tmp/.orchestrator-awaited).
set -u
target="${TESTBED_AWAIT_ORCHESTRATOR:-orchestrator:8080}"
host="${target%:*}"
port="${target##*:}"
patience="${TESTBED_AWAIT_S:-30}"
mark="${TESTBED_AWAIT_MARK:-/tmp/.orchestrator-awaited}"
[ "$#" -gt 0 ] || { echo "await-orchestrator: usage: await-orchestrator.sh CMD [ARG...]" >&2; exit 2; }
[ "$host" != "$target" ] && [[ "$port" =~ ^[0-9]+$ ]] \
    || { echo "await-orchestrator: TESTBED_AWAIT_ORCHESTRATOR=$target is not host:port" >&2; exit 2; }
[[ "$patience" =~ ^[0-9]+$ ]] \
    || { echo "await-orchestrator: TESTBED_AWAIT_S=$patience is not a whole number of seconds" >&2; exit 2; }

answers() {  # answers: the orchestrator's /healthz says 200 (one request, 2 s at most)
    exec 3<>"/dev/tcp/$host/$port" || return 1
    printf 'GET /healthz HTTP/1.0\r\nHost: %s\r\n\r\n' "$host" >&3 || return 1
    local line
    read -r -t 2 line <&3 || return 1
    [[ "$line" == *' 200 '* ]]
}

[ -e "$mark" ] && exec "$@"
# Microseconds since the epoch (bash 5's EPOCHREALTIME; SECONDS counts whole seconds).
deadline=$(( ${EPOCHREALTIME//[.,]/} + patience * 1000000 ))
until answers 2>/dev/null; do
    if [ "${EPOCHREALTIME//[.,]/}" -ge "$deadline" ]; then
        echo "await-orchestrator: $target did not answer in $patience s; starting anyway" >&2
        break
    fi
    sleep 0.1
done
exec 3<&- 2>/dev/null
touch "$mark" 2>/dev/null || true
exec "$@"
