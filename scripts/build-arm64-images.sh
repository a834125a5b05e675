#!/usr/bin/env bash
# Build the arm64 images of the emulated fleet's arm64 node (docker-compose.yml, profile
# arm64): the arm64 Debian base, the node agent's image and every experiment whose
# manifest lists linux/arm64, run on this amd64 host under qemu-user-static.
#
#   scripts/build-arm64-images.sh
#
# Images: testbed/debian-arm64:bookworm-slim (scripts/build-base-image.sh, ARCH=arm64),
# testbed/node:$TAG-arm64, and each arm64 experiment's `image:`. The Dockerfiles are the
# ordinary ones (FROM debian:bookworm-slim; with a registry `docker build --platform
# linux/arm64` builds them as they are): here the FROM line is pointed at the local
# arm64 base, the only change, and the build runs its RUN steps under emulation.
# The node's Python wheels come from PyPI for aarch64 (pip download --platform
# manylinux2014_aarch64 --only-binary=:all:), as the amd64 images' come from the host's
# wheelhouse: containers here reach no index. The native tools (tools/) are not built for
# arm64 (no Rust target nor C cross compiler for it here): the node image has no linkem
# and no libskewclock, its SIM is shaped by tbf, and an experiment that copies them
# (build/bin) cannot list linux/arm64 (refused below).
#
# Each image is built again only when what it is built from changed (its Dockerfile,
# the files it copies, the base image): a stamp in build/logs/stamps-arm64.
#
# Environment: TAG (default dev), PYTHON (default .venv/bin/python, else python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
. scripts/lib.sh

TAG="${TAG:-dev}"
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
BASE=testbed/debian-arm64:bookworm-slim
WHEELS=build/wheels-arm64
CTX=build/ctx-arm64
LOGS=build/logs
STAMPS="$LOGS/stamps-arm64"
#: The images' interpreter: Debian bookworm's python3 (as scripts/build-images.sh).
IMAGE_PYTHON=3.11
export SOURCE_DATE_EPOCH=315532800  # byte-identical wheels for an unchanged tree
export DOCKER_BUILDKIT=0  # the classic builder uses the local base image without a registry

die() { _status_clear; echo "build-arm64-images: error: $*" >&2; exit 1; }
mkdir -p "$LOGS" "$STAMPS"
phases_init

phase_begin "arm64 emulation (qemu-user-static, binfmt_misc)"
arm64_emulation
phase_end "arm64 emulation (qemu-user-static, binfmt_misc)"

phase_begin "arm64 base image"
ARCH=arm64 scripts/build-base-image.sh >"$LOGS/arm64-base.log" 2>&1 \
    || { tail -n 30 "$LOGS/arm64-base.log" >&2; die "the arm64 base image failed (log: $LOGS/arm64-base.log)"; }
phase_end "arm64 base image" "$(docker image inspect -f '{{.Id}} {{.Architecture}}' "$BASE" | cut -c8-19)"

# ---- wheelhouse: the agent's dependencies for aarch64, and the project's own wheel ----
wheelhouse() {
    local log="$LOGS/arm64-wheels.log" stamp
    : >"$log"
    # The agent's requirements, read from pyproject.toml: pip resolves them for aarch64.
    stamp="$(cat pyproject.toml | sha256sum | cut -c1-16)"
    if [ "$(cat "$WHEELS/node/.stamp" 2>/dev/null)" != "$stamp" ]; then
        rm -rf "$WHEELS/node"
        mkdir -p "$WHEELS/node"
        "$PYTHON" - >"$WHEELS/requested.txt" <<'PY'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["agent"]))
PY
        "$PYTHON" -m pip download --dest "$WHEELS/node" --only-binary=:all: \
            --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 \
            --python-version "$IMAGE_PYTHON" --implementation cp \
            -r "$WHEELS/requested.txt" >>"$log" 2>&1 \
            || { tail -n 30 "$log" >&2; die "pip download of the aarch64 wheels failed (log: $log)"; }
        # Pinned to what was downloaded: the image installs offline from these.
        "$PYTHON" - "$WHEELS/node" <<'PY'
import sys
from pathlib import Path
folder = Path(sys.argv[1])
pins = sorted(f"{w.name.split('-')[0]}=={w.name.split('-')[1]}" for w in folder.glob("*.whl"))
(folder / "requirements.txt").write_text("\n".join(pins) + "\n")
PY
        echo "$stamp" >"$WHEELS/node/.stamp"
    fi
    # The project's wheel (pure Python: one for every platform).
    rm -rf build/lib build/bdist.* "$WHEELS/app"
    mkdir -p "$WHEELS/app"
    "$PYTHON" -m pip wheel --no-deps --wheel-dir "$WHEELS/app" . >>"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; die "building the mbb-testbed wheel failed (log: $log)"; }
    rm -rf build/lib build/bdist.*
}
phase_begin "arm64 wheelhouse (PyPI, manylinux2014_aarch64)"
wheelhouse
phase_end "arm64 wheelhouse (PyPI, manylinux2014_aarch64)" "$(ls "$WHEELS/node"/*.whl | wc -l) wheels + $(basename "$WHEELS"/app/*.whl)"

# ---- images -------------------------------------------------------------------------
# build_arm64 TAG DOCKERFILE CONTEXT: the Dockerfile, FROM the arm64 base, in CONTEXT
build_arm64() {
    local tag="$1" dockerfile="$2" ctx="$3" log inputs stamp
    log="$LOGS/arm64-$(echo "$tag" | tr '/:' '__').log"
    stamp="$STAMPS/$(echo "$tag" | tr '/:' '__')"
    inputs="$( { cat "$dockerfile"; docker image inspect -f '{{.Id}}' "$BASE"
                 (cd "$ctx" && find . -type f -printf '%p %s\n' | sort
                  find . -type f -print0 | sort -z | xargs -0 cat | sha256sum); } \
               | sha256sum | cut -c1-32)"
    phase_begin "image $tag (arm64)"
    if [ "$(cat "$stamp" 2>/dev/null)" = "$inputs $(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null)" ]; then
        phase_end "image $tag (arm64)" "unchanged"
        return 0
    fi
    if ! sed -E "s#^FROM[[:space:]]+debian:bookworm-slim([[:space:]]|\$)#FROM $BASE\\1#" "$dockerfile" \
            | docker build --build-arg TESTBED_MODEMMANAGER=0 -t "$tag" -f - "$ctx" >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "docker build of $tag for arm64 failed (log: $log)"
    fi
    [ "$(docker image inspect -f '{{.Architecture}}' "$tag")" = arm64 ] \
        || die "$tag was built, but not for arm64 (does $dockerfile start FROM debian:bookworm-slim?)"
    echo "$inputs $(docker image inspect -f '{{.Id}}' "$tag")" >"$stamp"
    phase_end "image $tag (arm64)" "$(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}')"
}

# The node: its Dockerfile copies build/wheels/node/ (the aarch64 wheels) and
# build/stage/node/ (here only the project's wheel: no native tool for arm64).
ctx="$CTX/node"
rm -rf "$ctx"
mkdir -p "$ctx/build/wheels/node" "$ctx/build/stage/node/wheels"
cp .dockerignore "$ctx/"
cp -p "$WHEELS/node"/*.whl "$WHEELS/node/requirements.txt" "$ctx/build/wheels/node/"
cp -p "$WHEELS/app"/*.whl "$ctx/build/stage/node/wheels/"
build_arm64 "testbed/node:$TAG-arm64" node-image/Dockerfile "$ctx"

# Experiments listing linux/arm64: built from a context of what their Dockerfile copies.
for dir in experiments/*/; do
    dir="${dir%/}"
    name="$(basename "$dir")"
    [ -f "$dir/experiment.yaml" ] || continue
    grep -Eq '^platforms:.*linux/arm64' "$dir/experiment.yaml" || continue
    ! grep -Eq '^COPY[[:space:]]+build/' "$dir/Dockerfile" \
        || die "$dir lists linux/arm64 but its Dockerfile copies build/ (the native tools, built for amd64 only): drop linux/arm64 from its platforms"
    image="$(sed -n -E 's/^image:[[:space:]]*["'\'']?([^"'\''[:space:]#]+).*$/\1/p' "$dir/experiment.yaml" | head -n1)"
    [ -n "$image" ] || die "$dir/experiment.yaml has no image: key"
    ctx="$CTX/$name"
    rm -rf "$ctx"
    mkdir -p "$ctx"
    cp .dockerignore "$ctx/"
    while read -r src; do
        cp -a --parents "$src" "$ctx/"
    done < <(sed -n -E 's/^COPY[[:space:]]+([^[:space:]]+)[[:space:]].*/\1/p' "$dir/Dockerfile")
    build_arm64 "$image" "$dir/Dockerfile" "$ctx"
done
phase_summary
