#!/usr/bin/env bash
# Build the testbed's container images from this checkout: each phase (base image,
# wheelhouse, Rust tools, each image) prints its name and, when it ends, its time; a line
# every few seconds says what is still running, and a table of phases closes the run.
#
#   scripts/build-images.sh                 # everything
#   scripts/build-images.sh node tat        # only these (orchestrator, node, server,
#                                           # or an experiment's folder name)
#   scripts/build-images.sh --group demo    # what the demo campaign needs: the stack,
#                                           # the node, the demo's experiments
#   scripts/build-images.sh --group rest    # the others: monitoring, other experiments
#                                           # (scripts/up builds them while the demo runs)
#
# Images: testbed/orchestrator:$TAG, testbed/node:$TAG, testbed/server:$TAG,
# testbed/influxdb:$TAG, testbed/postgres:$TAG, testbed/front:$TAG (nginx before the
# orchestrator replicas), testbed/prometheus:$TAG, testbed/alertmanager:$TAG, and every
# experiment image named by `image:` in experiments/*/experiment.yaml whose `platforms:`
# include this host's (linux/amd64 by default; the arm64 ones are
# scripts/build-arm64-images.sh's). All start
# FROM debian:bookworm-slim (made locally by build-base-image.sh when no registry is
# reachable) and share their first layers: the same first RUN lines in the same order,
# so Docker's layer cache builds each once (see docs/architecture.md, "Images").
# The Rust tools build in the background; meanwhile the images build their layers that
# come before the first tool they copy (the slow ones: apt, the venv), then wait for the
# tools. The images start in order of need: the orchestrator first, then the rest of the
# stack and the demo's experiments, monitoring last. Python images get their packages from a wheelhouse built on the host
# (build/wheels), because containers here cannot reach PyPI; third-party wheels and the
# project's own wheel are separate layers, so a code change rebuilds in seconds.
#
# Environment: TAG (default dev), BUILD_JOBS (images built at once, default 3), PYTHON (default .venv/bin/python, else python3; must be
# the same minor version as Debian bookworm's python3, 3.11), VERBOSE=1 for full logs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
. scripts/lib.sh

TAG="${TAG:-dev}"
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
#: The images' interpreter (Debian bookworm's python3); host wheels must match it.
IMAGE_PYTHON="3.11"
WHEELS=build/wheels
DEPS="$WHEELS/deps"
APP="$WHEELS/app"
#: What each Python image installs: its folder build/wheels/IMAGE (the wheels, their
#: requirements.txt) and the extras of the project it installs.
declare -A IMAGE_EXTRAS=([orchestrator]="orchestrator dataset" [node]="agent")
#: uv, the orchestrator image's installer (bench/RESULTS.md: 1.5x pip on its 500 MB of
#: wheels) and the wheelhouse's resolver; from PyPI, like every wheel.
UV_REQUIREMENT='uv>=0.9,<1'
UV="$WHEELS/uv"
CATALOGUE=build/catalogue
LOGS=build/logs
#: Fixed wheel timestamps: an unchanged tree gives a byte-identical wheel, so Docker's
#: layer cache holds (1980-01-01, the earliest date a zip can store).
export SOURCE_DATE_EPOCH=315532800
export DOCKER_BUILDKIT=0  # the classic builder uses the local base image without a registry

die() {  # the message, then this shell's background jobs (cargo, the other builds) go too
    _status_clear; echo "build-images: error: $*" >&2
    kill $(jobs -p) 2>/dev/null || true
    exit 1
}

experiment_image() {  # experiment_image DIR -> the manifest's image: value
    sed -n -E 's/^image:[[:space:]]*["'\'']?([^"'\''[:space:]#]+)["'\'']?.*$/\1/p' "$1/experiment.yaml" | head -n1
}
experiment_platforms() {  # experiment_platforms DIR -> the manifest's platforms, one a
    # line (linux/amd64 when it lists none: orchestrator/catalogue/manifest.py)
    local listed
    listed="$(sed -n -E 's/^platforms:[[:space:]]*\[([^]#]*)\].*$/\1/p' "$1/experiment.yaml" | head -n1)"
    [ -n "$listed" ] || listed=linux/amd64
    echo "$listed" | tr ',' '\n' | tr -d " \"'"
}
#: The platform these builds make images for: the host's (docker build without
#: --platform). An experiment that does not provide it is built for the platforms it
#: lists by scripts/build-arm64-images.sh (arm64).
HOST_PLATFORM="linux/$(dpkg --print-architecture 2>/dev/null || echo amd64)"

# ---- what to build ---------------------------------------------------------------
# The experiments the demo campaign runs (deploy/campaigns/demo.yaml's `experiment:`).
demo_experiments=" $(sed -n -E 's/^[[:space:]-]*experiment:[[:space:]]*([A-Za-z0-9_.-]+).*/\1/p' deploy/campaigns/demo.yaml 2>/dev/null | tr '\n' ' ') "
in_demo() { case "$demo_experiments" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
want_all=1; declare -A want=()
if [ "${1:-}" = --group ]; then
    [ "$#" = 2 ] || die "--group takes one of: demo, rest"
    case "$2" in
        demo) set -- orchestrator node server influxdb postgres front $demo_experiments ;;
        rest) set -- prometheus alertmanager
              for dir in experiments/*/; do
                  name="$(basename "$dir")"
                  [ ! -f "$dir/experiment.yaml" ] || in_demo "$name" || set -- "$@" "$name"
              done ;;
        *) die "unknown group '$2' (demo or rest)" ;;
    esac
fi
if [ "$#" -gt 0 ]; then
    want_all=0
    for name in "$@"; do
        case "$name" in
            orchestrator|node|server|influxdb|postgres|front|prometheus|alertmanager) ;;
            *) [ -f "experiments/$name/experiment.yaml" ] \
                   || die "unknown image '$name' (orchestrator, node, server, influxdb, postgres, front, prometheus, alertmanager, or one of: $(cd experiments && ls -d */ | tr -d / | tr '\n' ' '))" ;;
        esac
        want[$name]=1
    done
fi
wanted() { [ "$want_all" -eq 1 ] || [ -n "${want[$1]:-}" ]; }

mkdir -p "$LOGS"
rm -f "$LOGS/superseded"  # this run's list of images its builds replace
phases_init

# ---- base image ------------------------------------------------------------------
# In the background: on a fresh machine debootstrap waits on the disk and the mirror
# most of its time, while the wheelhouse and cargo want the CPU.
base_image() {
    phase_begin "base image"
    scripts/build-base-image.sh
    phase_end "base image" "$(docker image inspect -f '{{.Id}}' debian:bookworm-slim | cut -c8-19)"
}

# ---- wheelhouse (only for the Python images) -------------------------------------
build_wheelhouse() {
    local have log stamp image extra extras
    phase_begin "wheelhouse"
    have="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
        || die "cannot run $PYTHON (set PYTHON to a Python $IMAGE_PYTHON interpreter)"
    [ "$have" = "$IMAGE_PYTHON" ] \
        || die "$PYTHON is Python $have but the images run Python $IMAGE_PYTHON: wheels would not match (set PYTHON)"
    log="$LOGS/wheels.log"
    : >"$log"
    # Third-party wheels: rebuilt only when the dependency list changes. All extras are
    # downloaded together (one consistent set of versions, and uv's wheel); then each
    # Python image gets a folder of only the wheels its extras need (IMAGE_EXTRAS), with
    # their pinned list, resolved by uv offline against that set: the node image carries
    # the agent's few dependencies, not the orchestrator's numpy, scipy and pyarrow.
    stamp="$( { cat pyproject.toml; declare -p IMAGE_EXTRAS; echo "$UV_REQUIREMENT"; } | sha256sum | cut -c1-16)-py$have"
    if [ "$(cat "$DEPS/.stamp" 2>/dev/null)" != "$stamp" ]; then
        rm -rf "$DEPS" "$UV" "$WHEELS/dataset"
        for image in "${!IMAGE_EXTRAS[@]}"; do rm -rf "${WHEELS:?}/$image"; done
        mkdir -p "$DEPS"
        # setuptools/wheel too: the project's own wheel is then built with --no-index.
        "$PYTHON" -m pip wheel --wheel-dir "$DEPS" '.[orchestrator,agent,dataset]' 'setuptools>=68' wheel \
            "$UV_REQUIREMENT" >>"$log" 2>&1 \
            || { tail -n 30 "$log" >&2; die "pip wheel of the dependencies failed (log: $log)"; }
        rm -f "$DEPS"/mbb_testbed-*.whl
        # uv's binary, out of its wheel (a zip; no install needed).
        "$PYTHON" - "$DEPS" "$UV" <<'PY' >>"$log" 2>&1 || die "unpacking uv failed (log: $log)"
import os, sys, zipfile
from pathlib import Path
wheel = next(Path(sys.argv[1]).glob("uv-*.whl"))
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))
    Path(sys.argv[2]).write_bytes(z.read(name))
os.chmod(sys.argv[2], 0o755)
wheel.unlink()
PY
        for image in "${!IMAGE_EXTRAS[@]}"; do
            mkdir -p "$WHEELS/$image"
            extras=()
            for extra in ${IMAGE_EXTRAS[$image]}; do extras+=(--extra "$extra"); done
            "$UV" pip compile pyproject.toml "${extras[@]}" \
                --python "$PYTHON" --no-index --find-links "$DEPS" --no-cache \
                --no-header --no-annotate --quiet -o "$WHEELS/$image/requirements.txt" >>"$log" 2>&1 \
                || { tail -n 30 "$log" >&2; die "resolving the $image image's wheels failed (log: $log)"; }
            "$PYTHON" - "$DEPS" "$WHEELS/$image" <<'PY' >>"$log" 2>&1 \
                || die "staging the $image image's wheels failed (log: $log)"
import os, re, sys
from pathlib import Path
deps, out = Path(sys.argv[1]), Path(sys.argv[2])
def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
wheels = {norm(w.name.split("-")[0]): w for w in deps.glob("*.whl")}
for line in (out / "requirements.txt").read_text().split("\n"):
    name = line.split("==")[0].strip()
    if name and not name.startswith("#"):
        if norm(name) not in wheels:
            sys.exit(f"no wheel for {line} in {deps}")
        os.link(wheels[norm(name)], out / wheels[norm(name)].name)
PY
        done
        # The orchestrator image installs with uv: its binary beside its wheels.
        ln "$UV" "$WHEELS/orchestrator/uv"
        echo "$stamp" >"$DEPS/.stamp"
    fi
    # The project's wheel, when its sources changed: pip takes 5-10 s on a loaded
    # machine, every second of a warm `scripts/up`. The stamp is every file the wheel
    # is made of (its packages and pyproject.toml), contents and names.
    stamp="$( { find orchestrator studies node-image/node_agent common/testbed_common common/testbed_kit -type f \
                  ! -path '*/__pycache__/*' ! -name '*.pyc' -print0; printf 'pyproject.toml\0'; } \
              | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
    if [ "$(cat "$APP/.stamp" 2>/dev/null)" != "$stamp" ] || ! ls "$APP"/*.whl >/dev/null 2>&1; then
        # Stale setuptools output in build/ would leak deleted modules into the wheel.
        rm -rf build/lib build/bdist.* "$APP"
        mkdir -p "$APP"
        "$PYTHON" -m pip wheel --no-deps --no-index --find-links "$DEPS" --wheel-dir "$APP" . \
            >>"$log" 2>&1 || { tail -n 30 "$log" >&2; die "building the mbb-testbed wheel failed (log: $log)"; }
        rm -rf build/lib build/bdist.*
        echo "$stamp" >"$APP/.stamp"
    fi
    phase_end "wheelhouse" "$WHEELS: $(for image in "${!IMAGE_EXTRAS[@]}"; do printf '%s %s wheels, ' "$image" "$(ls "$WHEELS/$image"/*.whl | wc -l)"; done)+ $(basename "$APP"/*.whl)"
}

stage_catalogue() {
    local manifest name
    rm -rf "$CATALOGUE"
    mkdir -p "$CATALOGUE"
    for manifest in experiments/*/experiment.yaml; do
        name="$(basename "$(dirname "$manifest")")"
        mkdir -p "$CATALOGUE/$name"
        cp -p "$manifest" "$CATALOGUE/$name/experiment.yaml"  # -p: its time, for the stamp
    done
}

# ---- native tools (tools/, Rust) ---------------------------------------------------
BIN=build/bin
stage_native_tools() {  # build the Rust tools once and stage them for COPY build/bin/...
    command -v cargo >/dev/null \
        || die "cargo is missing: the native tools (tools/) need a Rust toolchain (https://rustup.rs)"
    local log="$LOGS/cargo.log"
    phase_begin "Rust tools (cargo build)"
    # At the default priority: every image's last steps wait for it (bench/RESULTS.md: at
    # nice 5 it took 105 s to 204 s of a fresh start, slower as more images built beside
    # it, and the stack waited for it).
    (cd tools && cargo build --release -p abw -p linkem -p flows) >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; die "building the native tools failed (log: $log)"; }
    mkdir -p "$BIN"
    # Binaries are linked against the host's glibc; the images are Debian bookworm too.
    for tool in abw linkem testbed-flows; do
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
    phase_end "Rust tools (cargo build)" "$BIN: abw, linkem, testbed-flows, libskewclock.so"
}
start_native_tools() {  # the cargo build, in the background (it needs no Docker); it
    # leaves $READY/tools, or $READY/tools.failed, for the image jobs that wait on it
    ( ( stage_native_tools ) && touch "$READY/tools" || touch "$READY/tools.failed" ) &
}

# ---- images ------------------------------------------------------------------------
build_image() {  # build_image TAG DOCKERFILE CONTEXT
    local tag="$1" dockerfile="$2" context="$3" log id old note steps cached
    log="$LOGS/$(echo "$tag" | tr '/:' '__').log"
    old="$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)"
    phase_begin "image $tag"
    # NODE_MODEMMANAGER=1: the node image with mmcli, for real nodes (node-image/Dockerfile).
    local args=()
    if [ "$tag" = "testbed/node:$TAG" ] && [ "${NODE_MODEMMANAGER:-0}" = 1 ]; then
        args=(--build-arg TESTBED_MODEMMANAGER=1)
    fi
    # Each log line starts with its time (epoch seconds): where a build spends its time.
    if ! docker build "${args[@]}" $(build_weight "$tag") -t "$tag" -f "$dockerfile" "$context" 2>&1 \
            | layer_marks >"$log"; then
        tail -n 40 "$log" >&2
        die "docker build of $tag failed (full log: $log)"
    fi
    [ "${VERBOSE:-0}" = 1 ] && cat "$log"
    id="$(docker image inspect -f '{{.Id}}' "$tag" | cut -c8-19)"
    # The image this tag used to name is dropped once every build has ended
    # (drop_superseded), not now: a build running beside this one may be reusing its
    # layers from the cache, and removing them mid-build fails that build ("failed to
    # get layer ...: layer does not exist").
    if [ -n "$old" ] && [ "${old:7:12}" != "$id" ]; then
        echo "$old" >>"$LOGS/superseded"
    fi
    steps="$(grep -c ' ---> Running in' "$log" || true)"
    cached="$(grep -c ' ---> Using cache' "$log" || true)"
    if [ "$steps" -eq 0 ]; then note="cached"; else note="$steps steps run, $cached cached"; fi
    phase_end "image $tag" "$id, $note"
}

# needs_tools DOCKERFILE: it copies the Rust tools (build/bin, or a staged tree)
#: The first line of a Dockerfile that copies the Rust tools (build/bin, or a staged
#: tree), and the first that copies wheels: where its early builds cut it.
TOOLS_COPY='^COPY build/(bin|stage)/'
WHEELS_COPY='^COPY build/wheels/'
needs_tools() { grep -Eq "$TOOLS_COPY" "$1"; }
copies_wheels() { grep -Eq "$WHEELS_COPY" "$1"; }
# dockerfile_before ERE DOCKERFILE: DOCKERFILE up to its first line matching ERE (not
# that line): an early build of the same layers, which the whole build then finds cached.
dockerfile_before() { sed -E "\\#$1#,\$d" "$2"; }

# ---- staged trees -------------------------------------------------------------------
# The orchestrator's and the node's files from this checkout's builds (the Rust tools,
# the project's wheel, the experiment catalogue) come in one `COPY build/stage/NAME/ /`,
# a tree laid out as the image's root: one instruction where there was one per
# destination. With the classic builder each instruction is a container commit, 5-15 s
# on these large images on this machine's storage (docs/architecture.md, "Images"), and
# they are the last steps of the fresh start's critical path. Files keep their times
# (cp -p: the image fingerprint reads them); modes are set (COPY gives the image's
# existing folders, /usr/local among them, the stage's modes).
STAGE=build/stage
stage_tree() {  # stage_tree DOCKERFILE: the tree its `COPY build/stage/NAME/` names
    local name tree
    name="$(sed -n -E 's|^COPY build/stage/([^/[:space:]]+)/?[[:space:]].*|\1|p' "$1" | head -n1)"
    [ -n "$name" ] || return 0
    tree="$STAGE/$name"
    rm -rf "$tree"
    mkdir -p "$tree/usr/local/bin" "$tree/wheels"
    case "$name" in
        orchestrator)
            mkdir -p "$tree/opt/testbed"
            cp -Rp "$CATALOGUE" "$tree/opt/testbed/experiments"
            cp -p "$BIN/testbed-flows" "$tree/usr/local/bin/" ;;
        node)
            mkdir -p "$tree/usr/local/lib"
            cp -p "$BIN/linkem" "$tree/usr/local/bin/"
            cp -p "$BIN/libskewclock.so" "$tree/usr/local/lib/" ;;
        *) die "$1 copies build/stage/$name/, which scripts/build-images.sh does not stage" ;;
    esac
    cp -p "$APP"/*.whl "$tree/wheels/"
    chmod -R u=rwX,go=rX "$tree"
}

# Which images, in the order they start: what the first run needs first (the compose
# stack, the node, the demo's experiments), the orchestrator first of all (it is the
# longest build, and it lays down the layer the other Python images share), then
# PostgreSQL and InfluxDB, which share nothing with it and start at once; then the other
# experiments, and the monitoring, which nothing waits on.
experiment_builds() {  # experiment_builds demo|other: the entries of those experiments
    local dir name image group
    for dir in experiments/*/; do
        dir="${dir%/}"
        name="$(basename "$dir")"
        [ -f "$dir/experiment.yaml" ] || continue
        wanted "$name" || continue
        if in_demo "$name"; then group=demo; else group=other; fi
        [ "$group" = "$1" ] || continue
        # Built for the host's platform only when the experiment provides it.
        experiment_platforms "$dir" | grep -qx "$HOST_PLATFORM" || continue
        image="$(experiment_image "$dir")"
        [ -n "$image" ] || die "$dir/experiment.yaml has no image: key"
        [ -f "$dir/Dockerfile" ] || die "$dir has no Dockerfile for image $image"
        # Context: the repository root, so an experiment can copy the staged native tools
        # and the experiment kit (common/testbed_kit).
        builds+=("$image|$dir/Dockerfile|.")
    done
}
builds=()
wanted orchestrator && builds+=("testbed/orchestrator:$TAG|orchestrator/Dockerfile|.")
wanted postgres && builds+=("testbed/postgres:$TAG|deploy/postgres/Dockerfile|deploy/postgres")
wanted influxdb && builds+=("testbed/influxdb:$TAG|deploy/influxdb/Dockerfile|deploy/influxdb")
wanted node && builds+=("testbed/node:$TAG|node-image/Dockerfile|.")
wanted front && builds+=("testbed/front:$TAG|deploy/front/Dockerfile|deploy/front")
wanted server && builds+=("testbed/server:$TAG|server-image/Dockerfile|.")
experiment_builds demo
experiment_builds other
wanted prometheus && builds+=("testbed/prometheus:$TAG|deploy/prometheus/Dockerfile|deploy/prometheus")
wanted alertmanager && builds+=("testbed/alertmanager:$TAG|deploy/alertmanager/Dockerfile|deploy/alertmanager")
tools=0; wheels=0
for b in "${builds[@]}"; do
    IFS='|' read -r _ dockerfile _ <<<"$b"
    ! needs_tools "$dockerfile" || tools=1
    ! copies_wheels "$dockerfile" || wheels=1
done

# Readiness between the background jobs: a file per fact (the tools are staged, the
# shared layers exist), or NAME.failed; a job that needs one polls for it.
READY="$LOGS/ready"
rm -rf "$READY"; mkdir -p "$READY"
STAMPS="$LOGS/stamps"  # what each image was built from (image_job), and RUN_STAMP
mkdir -p "$STAMPS"

# ---- nothing changed since the last run ----------------------------------------------
# The checks below (the wheelhouse's stamp, cargo, each image's fingerprint) are each
# quick, but together with their bookkeeping they took 1.2 s of every warm `scripts/up`.
# When no file of the checkout changed since the last run that ended well with the same
# arguments (path, size and modification time of every file but .git, build/ and
# tools/target: as make compares them), nor the base image or a setting, and every image
# it built still has the id it had, there is nothing to build: one find and one
# `docker images`. Anything else (a file edited, even only touched; an image rebuilt by
# another checkout) takes the full path below, which finds what to rebuild.
RUN_STAMP="$STAMPS/run-$(printf '%s ' "$@" | sha256sum | cut -c1-16)"
tree_state() {  # the checkout, the base image and the settings the builds read
    { echo "TAG=$TAG NODE_MODEMMANAGER=${NODE_MODEMMANAGER:-0} PYTHON=$PYTHON"
      docker image inspect -f '{{.Id}}' debian:bookworm-slim 2>/dev/null || echo "no base image"
      checkout_state "$ROOT"; } | sha256sum | cut -c1-32
}
built_ids() {  # "tag id" of each wanted image
    local tags=() b tag
    for b in "${builds[@]}"; do IFS='|' read -r tag _ <<<"$b"; tags+=("$tag"); done
    image_ids "${tags[@]}"
}
tree_at_start="$(tree_state)"
if [ -f "$RUN_STAMP" ] && [ "$(cat "$RUN_STAMP")" = "$tree_at_start
$(built_ids)" ]; then
    phase_begin "every image unchanged (${#builds[@]})"
    for b in "${builds[@]}"; do
        IFS='|' read -r tag _ <<<"$b"
        touch "$READY/built-$(echo "$tag" | tr '/:' '__')"  # for scripts/up's early start
    done
    phase_end "every image unchanged (${#builds[@]})" "no file changed since the last build"
    phase_summary
    exit 0
fi
rm -f "$RUN_STAMP"
base_image &
base_pid=$!
wait_ready() {  # wait_ready NAME: until $READY/NAME exists (fails if NAME.failed does)
    until [ -e "$READY/$1" ]; do
        [ ! -e "$READY/$1.failed" ] || return 1
        sleep 0.2
    done
}

# The cargo build (CPU) overlaps the wheelhouse and the first images (network, disk).
# The wheelhouse builds in the background too: the first image's layers before it
# copies the wheels start as soon as the base image is there (early_layers, below), and
# so do the images that copy no wheels; those that do wait for them ($READY/wheels).
[ "$tools" = 0 ] || start_native_tools
wheels_pid=
wheelhouse_job() {  # the wheelhouse, in the background: $READY/wheels, or wheels.failed
    if (build_wheelhouse); then touch "$READY/wheels"; else touch "$READY/wheels.failed"; return 1; fi
}
[ "$wheels" = 0 ] || { wheelhouse_job & wheels_pid=$!; }
wanted orchestrator && stage_catalogue

instructions() {  # instructions DOCKERFILE: one line per instruction, as the cache
    # compares them (continuation lines joined, comments dropped, spaces collapsed)
    awk '/^[[:space:]]*#/ || /^[[:space:]]*$/ {next}
         {line = $0; sub(/^[[:space:]]+/, "", line)
          if (line ~ /\\$/) {sub(/\\$/, "", line); pending = pending line " "; next}
          $0 = pending line; pending = ""; $1 = $1; print}' "$1"
}
shared_steps() {  # shared_steps A B: how many first instructions Dockerfiles A and B share
    local n=0 x y
    while IFS= read -r x <&3 && IFS= read -r y <&4; do
        [ "$x" = "$y" ] || break
        n=$((n + 1))
    done 3< <(instructions "$1") 4< <(instructions "$2")
    echo "$n"
}

# Shared layers are built once: an image waits for the earlier image in the queue that
# shares the most of its first steps (the orchestrator, for the Python runtime and the
# network tools), until that build has committed them, then finds them in
# the cache. Builds side by side would otherwise each build them: the cache has a layer
# only once it is committed. Each build leaves $READY/marks-IMAGE/step-N as it passes
# step N, then done (or failed).
layer_builder="${builds[0]:-}"
MARKS=  # the marks folder of this job's image
marks_dir() { echo "$READY/marks-$(echo "$1" | tr '/:' '__')"; }  # marks_dir TAG
layer_marks() {  # layer_marks: build output on stdin -> each line with its time (epoch
    # seconds: where a build spends its time); with $MARKS set, also $MARKS/step-N once
    # step N is committed (the next step has begun)
    local line n
    while IFS= read -r line; do
        printf '%s %s\n' "$EPOCHREALTIME" "$line"
        if [ -n "$MARKS" ] && [[ "$line" =~ ^Step\ ([0-9]+)/ ]]; then
            for ((n = ${BASH_REMATCH[1]} - 1; n >= 1; n--)); do
                [ -e "$MARKS/step-$n" ] && break
                touch "$MARKS/step-$n"
            done
        fi
    done
}
mark_steps() {  # mark_steps N: steps 1..N are committed (a build that ended after step N)
    local n
    for ((n = 1; n <= $1; n++)); do touch "$MARKS/step-$n"; done
}
wait_layers() {  # wait_layers ENTRY: until the earlier image sharing the most of ENTRY's
    # first steps has committed them
    local dockerfile other other_tag other_dockerfile n best=1 from=
    IFS='|' read -r _ dockerfile _ <<<"$1"
    for other in "${builds[@]}"; do
        [ "$other" != "$1" ] || break
        IFS='|' read -r other_tag other_dockerfile _ <<<"$other"
        n="$(shared_steps "$other_dockerfile" "$dockerfile")"
        if [ "$n" -gt "$best" ]; then best=$n; from=$other_tag; fi
    done
    [ -n "$from" ] || return 0  # FROM alone: the base image, already there
    from="$(marks_dir "$from")"
    until [ -e "$from/step-$best" ] || [ -e "$from/done" ]; do
        [ ! -e "$from/failed" ] || return 1
        sleep 0.2
    done
}

# build_weight TAG: the CPU weight of TAG's build steps. The first image (the
# orchestrator) is the fresh start's critical path: a chain of steps, each waiting for the
# one before, while the other images build beside it and need only what is left of two
# cores. Its steps keep the engine's default weight (1024); the others' run at a quarter
# of it (--cpu-shares, which the classic builder gives each step's container), below
# cargo's too, which every image's last steps wait for. The weight
# counts only when the CPU is short; the commits are the engine's own work, not weighed.
build_weight() {
    local builder_tag
    IFS='|' read -r builder_tag _ <<<"$layer_builder"
    [ "$1" = "$builder_tag" ] || echo "--cpu-shares 256"
}
build_prefix() {  # build_prefix DOCKERFILE CONTEXT TAG: its layers before the first Rust tool
    # A Dockerfile cut before its first `COPY build/bin/` (or `build/stage/`) builds the
    # same layers as the whole one, which then finds them in the cache: the slow steps
    # (apt, the venv) run while cargo does, instead of after it. The Dockerfiles stay
    # ordinary.
    local log="$LOGS/$(echo "$3" | tr '/:' '__').prefix.log"
    phase_begin "$3 (its layers before the tools)"
    if ! dockerfile_before "$TOOLS_COPY" "$1" | docker build $(build_weight "$3") -f - "$2" 2>&1 \
            | layer_marks >"$log"; then
        tail -n 40 "$log" >&2
        return 1
    fi
    phase_end "$3 (its layers before the tools)"
}
# An image whose inputs have not changed since it was built is not handed to Docker:
# the classic builder's cache check takes a fraction of a second per instruction, seconds
# per image and most of a warm start's build phase. The inputs: the Dockerfile, the
# build settings, the base image, and every file its COPY lines name (path, size and
# modification time, as make compares them: a changed file is rebuilt; a file only
# touched goes through Docker's cache, which finds it unchanged). The record is
# build/logs/stamps/IMAGE: the fingerprint and the image id built from it.
copy_sources() {  # copy_sources DOCKERFILE: the context paths its COPY and ADD lines
    # read, one a line
    local line words i
    while IFS= read -r line; do
        read -ra words <<<"$line"
        case "${words[0]}" in COPY|ADD) ;; *) continue ;; esac
        for ((i = 1; i < ${#words[@]} - 1; i++)); do
            [[ "${words[i]}" == --* ]] || echo "${words[i]}"
        done
    done < <(instructions "$1")
}
# stage_context DOCKERFILE: prints a build context holding only what DOCKERFILE copies
# (hard links under build/ctx, with the repository's .dockerignore), for an image built
# from the repository root. The classic builder sends its whole context to the engine
# before the first step, each build: the root's was 181 MB (the orchestrator's wheels
# and uv), 5 s a build under load, for the node, the server and each experiment too,
# which copy a few MB. The Dockerfiles stay as they are: the paths are the root's.
CTX=build/ctx
stage_context() {
    local dir src path
    dir="$CTX/$(echo "$1" | tr '/' '_')"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp .dockerignore "$dir/"
    while IFS= read -r src; do
        # A source not there yet (the Rust tools, for the layers before them) is left out.
        while IFS= read -r path; do
            [ ! -e "$path" ] || cp -al --parents "${path%/}" "$dir/"
        done < <(compgen -G "$src" || true)
    done < <(copy_sources "$1")
    echo "$dir"
}
image_inputs() {  # image_inputs DOCKERFILE CONTEXT: the fingerprint of what a build reads
    local srcs=()
    mapfile -t srcs < <(copy_sources "$1")
    {
        cat "$1"
        echo "TAG=$TAG NODE_MODEMMANAGER=${NODE_MODEMMANAGER:-0}"
        docker image inspect -f '{{.Id}}' debian:bookworm-slim
        [ "${#srcs[@]}" -eq 0 ] || (cd "$2" && find "${srcs[@]}" \( -name __pycache__ -o -name '*.pyc' \) -prune \
            -o -type f -printf '%p %s %T@\n' | sort)
    } | sha256sum | cut -c1-32
}
build_context() {  # build_context DOCKERFILE CONTEXT: the folder to send as CONTEXT
    if [ "$2" = . ]; then stage_context "$1"; else echo "$2"; fi
}
image_job() {  # image_job ENTRY: build one image, waiting for what it needs
    local tag dockerfile context stamp inputs
    IFS='|' read -r tag dockerfile context <<<"$1"
    MARKS="$(marks_dir "$tag")"
    mkdir -p "$MARKS"
    # Whatever ends this job early (a failure, `die`) tells those waiting on its layers.
    trap '[ -e "$MARKS/done" ] || touch "$MARKS/failed"' EXIT
    if [ "$1" = "$layer_builder" ]; then
        wait_ready early || return 1
    fi
    if copies_wheels "$dockerfile"; then
        wait_ready wheels || die "building the wheelhouse failed (see above)"
    fi
    stamp="$STAMPS/$(echo "$tag" | tr '/:' '__')"
    if [ -f "$stamp" ]; then
        # The fingerprint reads the files the image copies, the staged tools among them:
        # an image built before waits for this run's cargo (seconds when nothing changed).
        if needs_tools "$dockerfile"; then
            wait_ready tools || die "building the native tools failed (log: $LOGS/cargo.log)"
        fi
        stage_tree "$dockerfile"
        inputs="$(image_inputs "$dockerfile" "$context")"
        if [ "$(cat "$stamp")" = "$inputs $(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null)" ]; then
            phase_begin "image $tag"
            phase_end "image $tag" "$(cut -d' ' -f2 "$stamp" | cut -c8-19), unchanged"
            touch "$MARKS/done"
            touch "$READY/built-$(echo "$tag" | tr '/:' '__')"
            return 0
        fi
        rm -f "$stamp"
    fi
    wait_layers "$1" || die "$tag: the shared layers failed to build (see above)"
    if needs_tools "$dockerfile" && [ ! -e "$READY/tools" ]; then
        build_prefix "$dockerfile" "$(build_context "$dockerfile" "$context")" "$tag" \
            || die "docker build of $tag's first layers failed (log: $LOGS)"
        mark_steps "$(dockerfile_before "$TOOLS_COPY" "$dockerfile" | instructions /dev/stdin | wc -l)"
        wait_ready tools || die "building the native tools failed (log: $LOGS/cargo.log)"
    fi
    # Taken now, with the tools staged (on a fresh machine they did not exist at the start).
    stage_tree "$dockerfile"
    inputs="$(image_inputs "$dockerfile" "$context")"
    build_image "$tag" "$dockerfile" "$(build_context "$dockerfile" "$context")" || return 1
    touch "$MARKS/done"
    echo "$inputs $(docker image inspect -f '{{.Id}}' "$tag")" >"$stamp"
    # For scripts/up, which starts PostgreSQL and InfluxDB as soon as theirs are built.
    touch "$READY/built-$(echo "$tag" | tr '/:' '__')"
}
run_builds() {  # run_builds ENTRY...: up to BUILD_JOBS at once, a new one as soon as any
    # ends (the queue's order is its priority)
    local -A running=()
    local b done_pid
    for b in "$@"; do
        while [ "${#running[@]}" -ge "$BUILD_JOBS" ]; do
            wait -n -p done_pid "${!running[@]}" || die "an image failed to build (see above)"
            unset "running[$done_pid]"
        done
        image_job "$b" &
        running[$!]=1
    done
    while [ "${#running[@]}" -gt 0 ]; do
        wait -n -p done_pid "${!running[@]}" || die "an image failed to build (see above)"
        unset "running[$done_pid]"
    done
}
# early_layers: the first image's steps before its first `COPY build/wheels/` (apt, its
# metadata: on the fresh start's critical path) need only the base image, so they build
# as soon as it is there, from an empty context (they copy nothing), while the other
# images start beside them (each waits for the steps it shares, as from the first
# image's own build); that image's build waits for them ($READY/early), then finds them
# cached. Only where that image was never built here (a fresh machine): otherwise they
# are cached, and the check alone costs seconds.
early_layers() {
    local tag dockerfile ctx log
    IFS='|' read -r tag dockerfile _ <<<"$layer_builder"
    if [ -n "$tag" ] && [ -n "$wheels_pid" ] && [ ! -f "$STAMPS/$(echo "$tag" | tr '/:' '__')" ] \
            && copies_wheels "$dockerfile"; then
        ctx="$(mktemp -d)"
        log="$LOGS/$(echo "$tag" | tr '/:' '__').early.log"
        phase_begin "$tag (its layers before the wheels)"
        MARKS="$(marks_dir "$tag")"
        mkdir -p "$MARKS"
        if ! dockerfile_before "$WHEELS_COPY" "$dockerfile" | docker build -f - "$ctx" 2>&1 \
                | layer_marks >"$log"; then
            rmdir "$ctx"
            tail -n 40 "$log" >&2
            touch "$READY/early.failed"
            die "docker build of $tag's first layers failed (log: $log)"
        fi
        rmdir "$ctx"
        mark_steps "$(dockerfile_before "$WHEELS_COPY" "$dockerfile" | instructions /dev/stdin | wc -l)"
        phase_end "$tag (its layers before the wheels)"
    fi
    touch "$READY/early"
}
wait "$base_pid" || die "no base image debian:bookworm-slim (see above)"
early_layers &
early_pid=$!
# A few images at a time: a cached build is mostly waiting on the daemon, and a fresh
# one on the disk and the mirror. BUILD_JOBS=1: one at a time.
BUILD_JOBS="${BUILD_JOBS:-3}"
[ "${#builds[@]}" -eq 0 ] || run_builds "${builds[@]}"
wait "$early_pid" || die "building the first image's first layers failed (see above)"
[ -z "$wheels_pid" ] || wait "$wheels_pid" || die "building the wheelhouse failed (see above)"
[ "$tools" = 0 ] || wait_ready tools || die "building the native tools failed (log: $LOGS/cargo.log)"
drop_superseded() {  # the images rebuilt tags named before, unless something still uses
    # them (a container, another tag): rebuilds then do not fill the disk
    local image
    [ -f "$LOGS/superseded" ] || return 0
    for image in $(sort -u "$LOGS/superseded"); do
        # still named by a tag (another tag, or this run's build came back to it): kept
        [ "$(docker image inspect -f '{{len .RepoTags}}' "$image" 2>/dev/null)" = 0 ] || continue
        docker rmi "$image" >/dev/null 2>&1 || true
    done
    rm -f "$LOGS/superseded"
}
drop_superseded
# The tree as this run found it: a file changed meanwhile makes the next run check again.
printf '%s\n%s\n' "$tree_at_start" "$(built_ids)" >"$RUN_STAMP"
phase_summary
