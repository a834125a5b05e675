# Shared helpers for the project's scripts (sourced, not run).

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
# in_ci: CI=true (or 1, yes), as the tests read it (tests/conftest.py, tools/testsupport).
in_ci() { case "${CI:-}" in [Tt][Rr][Uu][Ee] | 1 | [Yy][Ee][Ss]) return 0 ;; *) return 1 ;; esac; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECRETS="$REPO/deploy/.secrets"
ENV_FILE="$SECRETS/compose.env"
PROJECT="${TESTBED_COMPOSE_PROJECT:-testbed}"
URL="http://127.0.0.1:${TESTBED_PORT:-8080}"

# compose ARGS...: Docker Compose v2 when present, else v1 (docker-compose).
compose() {
    if docker compose version >/dev/null 2>&1; then
        docker compose -p "$PROJECT" --env-file "$ENV_FILE" -f "$REPO/docker-compose.yml" "$@"
    elif command -v docker-compose >/dev/null 2>&1; then
        docker-compose -p "$PROJECT" --env-file "$ENV_FILE" -f "$REPO/docker-compose.yml" "$@"
    else
        die "Docker Compose is missing: install the docker-compose-plugin or docker-compose package"
    fi
}

# tb ARGS...: the testbed CLI inside the orchestrator container, as the administrator.
tb() {
    docker exec -e TESTBED_URL=http://127.0.0.1:8080 -e "TESTBED_TOKEN=$TESTBED_ADMIN_TOKEN" \
        testbed-orchestrator testbed "$@"
}

load_env() {
    [ -f "$ENV_FILE" ] || return 0
    set -a; . "$ENV_FILE"; set +a
}

set_env() {  # set_env NAME VALUE: record a secret for compose
    mkdir -p "$SECRETS"; chmod 700 "$SECRETS"
    touch "$ENV_FILE"; chmod 600 "$ENV_FILE"
    grep -v "^$1=" "$ENV_FILE" > "$ENV_FILE.tmp" || true
    echo "$1=$2" >> "$ENV_FILE.tmp"
    mv "$ENV_FILE.tmp" "$ENV_FILE"
    export "$1=$2"
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...: poll until COMMAND succeeds
    local limit=$1 what=$2; shift 2
    local end=$(( $(date +%s) + limit ))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$end" ] || die "timed out after ${limit}s waiting for $what"
        sleep 1
    done
}
