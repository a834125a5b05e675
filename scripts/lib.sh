# Shared helpers for the project's scripts (sourced, not run).

say() {  # say TEXT: a step's heading (bold on a terminal)
    _status_clear
    if [ -t 2 ]; then printf '\033[1m==> %s\033[0m\n' "$*" >&2; else printf '==> %s\n' "$*" >&2; fi
}
die() { _status_clear; printf 'error: %s\n' "$*" >&2; exit 1; }
# in_ci: CI=true (or 1, yes), as the tests read it (tests/conftest.py, tools/testsupport).
in_ci() { case "${CI:-}" in [Tt][Rr][Uu][Ee] | 1 | [Yy][Ee][Ss]) return 0 ;; *) return 1 ;; esac; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECRETS="$REPO/deploy/.secrets"
ENV_FILE="$SECRETS/compose.env"
PROJECT="${TESTBED_COMPOSE_PROJECT:-testbed}"
URL="http://127.0.0.1:${TESTBED_PORT:-8080}"

# compose ARGS...: Docker Compose v2 when present, else v1 (docker-compose). With
# TESTBED_COMPOSE_OVERRIDE=FILE (relative to the repository, or absolute) that file
# overrides docker-compose.yml, e.g. deploy/compose/proxy-long.yml (the long proxy run's
# diurnal links, docs/abw-proxy.md).
compose() {
    local files=(-f "$REPO/docker-compose.yml")
    if [ -n "${TESTBED_COMPOSE_OVERRIDE:-}" ]; then
        local override="$TESTBED_COMPOSE_OVERRIDE"
        case "$override" in /*) ;; *) override="$REPO/$override" ;; esac
        [ -f "$override" ] || die "TESTBED_COMPOSE_OVERRIDE: no file $override"
        files+=(-f "$override")
    fi
    if docker compose version >/dev/null 2>&1; then
        docker compose -p "$PROJECT" --env-file "$ENV_FILE" "${files[@]}" "$@"
    elif command -v docker-compose >/dev/null 2>&1; then
        docker-compose -p "$PROJECT" --env-file "$ENV_FILE" "${files[@]}" "$@"
    else
        die "Docker Compose is missing: install the docker-compose-plugin or docker-compose package"
    fi
}

# tb ARGS...: the testbed CLI inside the orchestrator container, as the administrator.
tb() {
    docker exec -e TESTBED_URL=http://127.0.0.1:8080 -e "TESTBED_TOKEN=$TESTBED_ADMIN_TOKEN" \
        testbed-orchestrator testbed "$@"
}

# random_secret: 32 random bytes as hex (a token or password that scripts/up makes).
random_secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# fleet_node_ids: the ids of deploy/fleet/nodes.yaml's nodes, one a line. Read by sed
# (the host may have no YAML parser) from its one-line `- {id: ...}` entries;
# tests/unit/test_fleet_compose.py checks that this finds every node.
fleet_node_ids() {
    sed -n -E 's/^[[:space:]]*-[[:space:]]*\{[[:space:]]*id:[[:space:]]*"?([A-Za-z0-9._-]+)"?[[:space:]]*[,}].*/\1/p' \
        "$REPO/deploy/fleet/nodes.yaml"
}

# node_token_var ID: the variable of $ENV_FILE that holds node ID's token.
node_token_var() { printf 'NODE_TOKEN_%s' "$(printf '%s' "$1" | tr 'a-z.-' 'A-Z__')"; }

# checkout_state DIR: one line per file of the checkout at DIR, "path size mtime" (as make
# compares files), sorted; none from .git, build/, tools/target, deploy/.secrets, the
# venv or caches, which builds write or never read (scripts/build-images.sh's fast path).
checkout_state() {
    (cd "$1" && find . \( -path ./.git -o -path ./build -o -path ./tools/target -o -path ./.venv \
                          -o -path ./deploy/.secrets -o -name __pycache__ -o -name '*.egg-info' \
                          -o -name .mypy_cache -o -name .ruff_cache -o -name .pytest_cache \) -prune \
                     -o -type f -printf '%p %s %T@\n' | LC_ALL=C sort)
}

# image_ids TAG...: "TAG ID" for each, the image its tag names now ("TAG missing"), from
# one `docker images` call.
image_ids() {
    docker images --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}' \
        | awk -v want="$*" 'BEGIN {n = split(want, w, " ")} {id[$1] = $2}
              END {for (i = 1; i <= n; i++) print w[i], (w[i] in id ? id[w[i]] : "missing")}'
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

wait_for() {  # wait_for SECONDS WHAT COMMAND...: poll until COMMAND succeeds, every POLL_S
    local limit=$1 what=$2; shift 2
    local end=$(( $(date +%s) + limit ))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$end" ] || die "timed out after ${limit}s waiting for $what"
        sleep "${POLL_S:-1}"
    done
}

# ---- phases: each step of a long script with its time, and no silent minute --------
# phases_init starts the record (unless an outer script already did: PHASE_DIR is
# exported, so build-images.sh run by scripts/up adds to up's table) and a ticker that
# says what is still running: a status line redrawn every second on a terminal, a plain
# line every TICK_S seconds otherwise (logs, CI). Phases may overlap (background jobs):
# each is a file in PHASE_DIR, so a subshell can begin and end its own.
TICK_S="${TICK_S:-15}"
_now() { date +%s.%N; }
_secs() { awk -v s="$1" -v e="$2" 'BEGIN{printf "%.1f", e-s}'; }
_phase_key() { printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_'; }
_status_clear() { [ -t 2 ] && [ -n "${PHASE_DIR:-}" ] && printf '\r\033[K' >&2; return 0; }

phases_init() {  # phases_init: start recording phases (the outermost script owns them)
    if [ -n "${PHASE_DIR:-}" ] && [ -d "$PHASE_DIR" ]; then return 0; fi
    PHASE_DIR="$(mktemp -d)"
    PHASE_T0="$(_now)"
    export PHASE_DIR PHASE_T0
    PHASE_OWNER=$$
    _ticker &
    PHASE_TICKER=$!
    trap '_phases_stop' EXIT
}

_phases_stop() {
    [ "${PHASE_OWNER:-}" = "$$" ] || return 0
    kill "$PHASE_TICKER" 2>/dev/null || true
    wait "$PHASE_TICKER" 2>/dev/null || true
    _status_clear
    rm -rf "$PHASE_DIR"
}

_running() {  # the phases still running, "name 12 s, name 3 s", or nothing
    local f now line out=""
    now="$(_now)"
    for f in "$PHASE_DIR"/*.run; do
        [ -f "$f" ] || continue
        [ -f "${f%.run}.quiet" ] && continue  # it shows its own progress
        { read -r start; read -r line; } <"$f" || continue
        out="${out:+$out, }$line $(awk -v s="$start" -v e="$now" 'BEGIN{printf "%d", e-s}') s"
    done
    printf '%s' "$out"
}

_ticker() {
    local last=0 t running
    while sleep 1; do
        [ -d "$PHASE_DIR" ] || return 0
        running="$(_running)"
        [ -n "$running" ] || continue
        if [ -t 2 ]; then
            printf '\r\033[K    ... %s' "$running" >&2
        else
            t="$(date +%s)"
            if [ $(( t - last )) -ge "$TICK_S" ]; then
                [ "$last" = 0 ] || printf '    ... still running: %s\n' "$running" >&2
                last="$t"
            fi
        fi
    done
}

phase_begin() {  # phase_begin [-q] NAME: NAME starts (-q: it draws its own progress)
    local quiet=0 key
    if [ "$1" = -q ]; then quiet=1; shift; fi
    key="$(_phase_key "$1")"
    printf '%s\n%s\n' "$(_now)" "$1" >"$PHASE_DIR/$key.run"
    [ "$quiet" = 0 ] || : >"$PHASE_DIR/$key.quiet"
    say "$1"
}

phase_end() {  # phase_end NAME [NOTE]: NAME is over; prints its time
    local key start end secs
    key="$(_phase_key "$1")"
    [ -f "$PHASE_DIR/$key.run" ] || return 0
    start="$(head -n1 "$PHASE_DIR/$key.run")"
    end="$(_now)"
    secs="$(_secs "$start" "$end")"
    printf '%s\t%s\t%s\t%s\n' "$(_secs "$PHASE_T0" "$start")" "$secs" "$1" "${2:-}" \
        >"$PHASE_DIR/$key.done"
    rm -f "$PHASE_DIR/$key.run" "$PHASE_DIR/$key.quiet"
    _status_clear
    printf '    %s: %s s%s\n' "$1" "$secs" "${2:+ ($2)}" >&2
}

phase_summary() {  # phase_summary: the table of phases, in the order they started
    [ "${PHASE_OWNER:-}" = "$$" ] || return 0
    _status_clear
    {
        printf '\n%-40s %8s %9s\n' "phase" "start s" "took s"
        cat "$PHASE_DIR"/*.done 2>/dev/null | sort -n -k1,1 \
            | awk -F'\t' '{printf "%-40s %8.1f %9.1f  %s\n", $3, $1, $2, $4}'
        printf '%-40s %8s %9.1f\n' "total" "" "$(_secs "$PHASE_T0" "$(_now)")"
    } >&2
}

# ---- arm64 under emulation (qemu-user-static, binfmt_misc) -------------------------
#: Debian's packages that run arm64 binaries on an amd64 host: qemu-user-static ships
#: the interpreter and its binfmt_misc entry (/usr/lib/binfmt.d/qemu-aarch64.conf).
ARM64_PACKAGES=(qemu-user-static)
arm64_emulation() {  # arm64_emulation: install qemu-user-static when missing, mount
    # binfmt_misc when it is not, and register qemu-aarch64. Debian's entry carries the F
    # flag: the kernel opens the interpreter when it is registered, so containers (whose
    # root has no qemu) run arm64 binaries through it too.
    local p missing=() conf=/usr/lib/binfmt.d/qemu-aarch64.conf misc=/proc/sys/fs/binfmt_misc
    [ "$(uname -m)" != aarch64 ] || return 0  # an arm64 host runs them natively
    for p in "${ARM64_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if [ "${#missing[@]}" -gt 0 ]; then
        [ "$(id -u)" = 0 ] || die "need root to install ${missing[*]} (arm64 emulation), or install them first"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
              --no-install-recommends "${missing[@]}"; } >/dev/null \
            || die "could not install ${missing[*]} with apt-get"
    fi
    if [ ! -e "$misc/register" ]; then
        mount -t binfmt_misc binfmt_misc "$misc" \
            || die "cannot mount binfmt_misc on $misc (arm64 emulation needs it; run as root)"
    fi
    if [ ! -e "$misc/qemu-aarch64" ]; then
        [ -f "$conf" ] || die "$conf is missing: reinstall qemu-user-static"
        grep -v '^#' "$conf" | head -n1 >"$misc/register" \
            || die "cannot register qemu-aarch64 with binfmt_misc"
    fi
    grep -q '^flags: .*F' "$misc/qemu-aarch64" \
        || die "qemu-aarch64 is registered without the F flag: containers cannot use it (echo -1 > $misc/qemu-aarch64, then run this again)"
}
