#!/usr/bin/env bash
# Build the testbed's container images from this checkout, one line per image.
#
#   scripts/build-images.sh                 # everything
#   scripts/build-images.sh node tat        # only these (orchestrator, node, server,
#                                           # or an experiment's folder name)
#
# Images: testbed/orchestrator:$TAG, testbed/node:$TAG, testbed/server:$TAG, and every
# experiment image named by `image:` in experiments/*/experiment.yaml. All start
# FROM debian:bookworm-slim (made locally by build-base-image.sh when no registry is
# reachable). Python images get their packages from a wheelhouse built on the host
# (build/wheels), because containers here cannot reach PyPI; third-party wheels and the
# project's own wheel are separate layers, so a code change rebuilds in seconds.
#
# Environment: TAG (default dev), PYTHON (default .venv/bin/python, else python3; must be
# the same minor version as Debian bookworm's python3, 3.11), VERBOSE=1 for full logs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TAG="${TAG:-dev}"
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
#: The images' interpreter (Debian bookworm's python3); host wheels must match it.
IMAGE_PYTHON="3.11"
WHEELS=build/wheels
DEPS="$WHEELS/deps"
APP="$WHEELS/app"
CATALOGUE=build/catalogue
LOGS=build/logs
#: Fixed wheel timestamps: an unchanged tree gives a byte-identical wheel, so Docker's
#: layer cache holds (1980-01-01, the earliest date a zip can store).
export SOURCE_DATE_EPOCH=315532800
export DOCKER_BUILDKIT=0  # the classic builder uses the local base image without a registry

die() { echo "build-images: error: $*" >&2; exit 1; }

experiment_image() {  # experiment_image DIR -> the manifest's image: value
    sed -n -E 's/^image:[[:space:]]*["'\'']?([^"'\''[:space:]#]+)["'\'']?.*$/\1/p' "$1/experiment.yaml" | head -n1
}

# ---- what to build ---------------------------------------------------------------
want_all=1; declare -A want=()
if [ "$#" -gt 0 ]; then
    want_all=0
    for name in "$@"; do
        case "$name" in
            orchestrator|node|server|influxdb) ;;
            *) [ -f "experiments/$name/experiment.yaml" ] \
                   || die "unknown image '$name' (orchestrator, node, server, influxdb, or one of: $(cd experiments && ls -d */ | tr -d / | tr '\n' ' '))" ;;
        esac
        want[$name]=1
    done
fi
wanted() { [ "$want_all" -eq 1 ] || [ -n "${want[$1]:-}" ]; }

mkdir -p "$LOGS"

# ---- base image ------------------------------------------------------------------
scripts/build-base-image.sh

# ---- wheelhouse (only for the Python images) -------------------------------------
build_wheelhouse() {
    local have log stamp extra report
    have="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
        || die "cannot run $PYTHON (set PYTHON to a Python $IMAGE_PYTHON interpreter)"
    [ "$have" = "$IMAGE_PYTHON" ] \
        || die "$PYTHON is Python $have but the images run Python $IMAGE_PYTHON: wheels would not match (set PYTHON)"
    log="$LOGS/wheels.log"
    : >"$log"
    # Third-party wheels: rebuilt only when the dependency list changes.
    stamp="$(cat pyproject.toml | sha256sum | cut -c1-16)-py$have"
    if [ "$(cat "$DEPS/.stamp" 2>/dev/null)" != "$stamp" ]; then
        rm -rf "$DEPS"
        mkdir -p "$DEPS"
        # setuptools/wheel too: the project's own wheel is then built with --no-index.
        "$PYTHON" -m pip wheel --wheel-dir "$DEPS" '.[orchestrator,agent]' 'setuptools>=68' wheel \
            >>"$log" 2>&1 || { tail -n 30 "$log" >&2; die "pip wheel of the dependencies failed (log: $log)"; }
        rm -f "$DEPS"/mbb_testbed-*.whl
        for extra in orchestrator agent; do
            report="$(mktemp)"
            "$PYTHON" -m pip install --dry-run --ignore-installed --no-index --find-links "$DEPS" \
                --quiet --report "$report" ".[$extra]" >>"$log" 2>&1 \
                || { rm -f "$report"; tail -n 30 "$log" >&2; die "resolving the $extra extra failed (log: $log)"; }
            "$PYTHON" - "$report" >"$DEPS/requirements-$extra.txt" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for item in report["install"]:
    meta = item["metadata"]
    if meta["name"].lower().replace("_", "-") != "mbb-testbed":
        print(f"{meta['name']}=={meta['version']}")
PY
            rm -f "$report"
        done
        echo "$stamp" >"$DEPS/.stamp"
    fi
    # The project's wheel, every time (seconds). Stale setuptools output in build/ would
    # leak deleted modules into the wheel, so it goes first.
    rm -rf build/lib build/bdist.* "$APP"
    mkdir -p "$APP"
    "$PYTHON" -m pip wheel --no-deps --no-index --find-links "$DEPS" --wheel-dir "$APP" . \
        >>"$log" 2>&1 || { tail -n 30 "$log" >&2; die "building the mbb-testbed wheel failed (log: $log)"; }
    rm -rf build/lib build/bdist.*
    echo "wheelhouse $WHEELS: $(ls "$DEPS"/*.whl | wc -l) dependency wheels + $(basename "$APP"/*.whl)"
}

stage_catalogue() {
    local manifest name
    rm -rf "$CATALOGUE"
    mkdir -p "$CATALOGUE"
    for manifest in experiments/*/experiment.yaml; do
        name="$(basename "$(dirname "$manifest")")"
        mkdir -p "$CATALOGUE/$name"
        cp "$manifest" "$CATALOGUE/$name/experiment.yaml"
    done
}

# ---- native tools (tools/, Rust) ---------------------------------------------------
BIN=build/bin
staged_tools=0
stage_native_tools() {  # build the Rust tools once and stage them for COPY build/bin/...
    [ "$staged_tools" = 0 ] || return 0
    command -v cargo >/dev/null \
        || die "cargo is missing: the native tools (tools/) need a Rust toolchain (https://rustup.rs)"
    local log="$LOGS/cargo.log"
    (cd tools && cargo build --release -p abw -p linkem) >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; die "building the native tools failed (log: $log)"; }
    mkdir -p "$BIN"
    # Binaries are linked against the host's glibc; the images are Debian bookworm too.
    for tool in abw linkem; do
        cmp -s "tools/target/release/$tool" "$BIN/$tool" || cp "tools/target/release/$tool" "$BIN/$tool"
    done
    # skewclock: the fault matrix's wrong clock (tools/skewclock/skewclock.c), a preload
    # library needing only syscall() and getenv() of the C library.
    command -v cc >/dev/null || die "cc is missing: tools/skewclock needs a C compiler (gcc)"
    cc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$BIN/libskewclock.so.new" \
        tools/skewclock/skewclock.c >>"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; die "building tools/skewclock failed (log: $log)"; }
    if cmp -s "$BIN/libskewclock.so.new" "$BIN/libskewclock.so"; then
        rm "$BIN/libskewclock.so.new"
    else
        mv "$BIN/libskewclock.so.new" "$BIN/libskewclock.so"
    fi
    staged_tools=1
    echo "native tools $BIN: abw, linkem, libskewclock.so"
}

# ---- images ------------------------------------------------------------------------
build_image() {  # build_image TAG DOCKERFILE CONTEXT
    local tag="$1" dockerfile="$2" context="$3" log start secs id old note steps cached
    log="$LOGS/$(echo "$tag" | tr '/:' '__').log"
    old="$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)"
    start="$(date +%s.%N)"
    if ! docker build -t "$tag" -f "$dockerfile" "$context" >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "docker build of $tag failed (full log: $log)"
    fi
    [ "${VERBOSE:-0}" = 1 ] && cat "$log"
    secs="$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')"
    id="$(docker image inspect -f '{{.Id}}' "$tag" | cut -c8-19)"
    # Drop the image this tag used to name, unless something still uses it (a container,
    # another tag): rebuilds then do not fill the disk with dangling images.
    if [ -n "$old" ] && [ "${old:7:12}" != "$id" ]; then
        docker rmi "$old" >/dev/null 2>&1 || true
    fi
    steps="$(grep -c '^ ---> Running in' "$log" || true)"
    cached="$(grep -c '^ ---> Using cache' "$log" || true)"
    if [ "$steps" -eq 0 ]; then note="cached"; else note="$steps steps run, $cached cached"; fi
    printf '%-28s %s  %6ss  (%s)\n' "$tag" "$id" "$secs" "$note"
}

if wanted orchestrator || wanted node; then
    build_wheelhouse
fi
if wanted orchestrator; then
    stage_catalogue
    build_image "testbed/orchestrator:$TAG" orchestrator/Dockerfile .
fi
if wanted node; then
    stage_native_tools  # linkem: the emulated fleet's operator links (node-links.sh)
    build_image "testbed/node:$TAG" node-image/Dockerfile .
fi
if wanted server; then
    stage_native_tools
    build_image "testbed/server:$TAG" server-image/Dockerfile .
fi
if wanted influxdb; then
    build_image "testbed/influxdb:$TAG" deploy/influxdb/Dockerfile deploy/influxdb
fi
for dir in experiments/*/; do
    dir="${dir%/}"
    name="$(basename "$dir")"
    [ -f "$dir/experiment.yaml" ] || continue
    wanted "$name" || continue
    image="$(experiment_image "$dir")"
    [ -n "$image" ] || die "$dir/experiment.yaml has no image: key"
    [ -f "$dir/Dockerfile" ] || die "$dir has no Dockerfile for image $image"
    # Context: the repository root, so an experiment can use the staged native tools,
    # the project wheel (shared analysis code) and other experiments' modules.
    if grep -q '^COPY build/' "$dir/Dockerfile"; then
        stage_native_tools
        [ -n "$(ls "$APP"/*.whl 2>/dev/null)" ] || build_wheelhouse
    fi
    build_image "$image" "$dir/Dockerfile" .
done
