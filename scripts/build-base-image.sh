#!/usr/bin/env bash
# Ensure the local base image debian:bookworm-slim exists.
#
# Every Dockerfile in this repository starts FROM debian:bookworm-slim so that a user
# with a registry gets the ordinary image. Where no registry is reachable (this
# project's own machines) the image is made from Debian packages instead: a minbase
# debootstrap into a temporary folder, cleaned of apt caches, then `docker import`ed
# under the same name. Idempotent: an existing image is left alone.
#
# ARCH=arm64 makes the arm64 base the arm64 images (the arm64 node, arm64 experiments)
# start from: the same debootstrap for arm64, its second stage run under qemu-user-static
# through binfmt_misc (scripts/lib.sh, arm64_emulation), imported as linux/arm64 under
# its own name, testbed/debian-arm64:bookworm-slim: Docker's image store holds one image
# per name, and the amd64 one keeps debian:bookworm-slim. Their Dockerfiles still say
# FROM debian:bookworm-slim (scripts/build-arm64-images.sh points the build at this
# image), so that a user with a registry builds them with `--platform linux/arm64`.
#
# Environment:
#   ARCH           Debian architecture (default: the host's; amd64 or arm64)
#   BASE_IMAGE     image to ensure (default debian:bookworm-slim; for a foreign ARCH,
#                  testbed/debian-ARCH:bookworm-slim)
#   DEBIAN_MIRROR  mirror for debootstrap (default http://deb.debian.org/debian)
#   SUITE          Debian suite (default bookworm)
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HOST_ARCH="$(dpkg --print-architecture)"
ARCH="${ARCH:-$HOST_ARCH}"
case "$ARCH" in amd64|arm64) ;; *) echo "build-base-image: error: ARCH=$ARCH: amd64 or arm64" >&2; exit 1 ;; esac
if [ "$ARCH" = "$HOST_ARCH" ]; then
    BASE_IMAGE="${BASE_IMAGE:-debian:bookworm-slim}"
else
    BASE_IMAGE="${BASE_IMAGE:-testbed/debian-$ARCH:bookworm-slim}"
fi
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE="${SUITE:-bookworm}"

die() { echo "build-base-image: error: $*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found; install Docker Engine first"
docker info >/dev/null 2>&1 || die "cannot talk to the Docker daemon (is it running? are you in the docker group?)"

if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    exit 0
fi

pull_log="$(mktemp)"
if [ "$ARCH" = "$HOST_ARCH" ] && docker pull -q "$BASE_IMAGE" >"$pull_log" 2>&1; then
    rm -f "$pull_log"
    echo "base image $BASE_IMAGE: pulled"
    exit 0
fi
if [ "$ARCH" = "$HOST_ARCH" ]; then
    echo "base image $BASE_IMAGE: pull failed ($(tail -n1 "$pull_log")); building it with debootstrap" >&2
else
    echo "base image $BASE_IMAGE: building it with debootstrap for $ARCH" >&2
fi
rm -f "$pull_log"

[ "$(id -u)" -eq 0 ] || die "debootstrap needs root; re-run as root (or pull $BASE_IMAGE elsewhere and 'docker load' it)"

if ! command -v debootstrap >/dev/null 2>&1; then
    apt_log="$(mktemp)"
    if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap; } >"$apt_log" 2>&1; then
        cat "$apt_log" >&2
        rm -f "$apt_log"
        die "could not install debootstrap with apt-get (see above)"
    fi
    rm -f "$apt_log"
fi

# A foreign architecture's second stage runs its binaries under qemu-user-static.
[ "$ARCH" = "$HOST_ARCH" ] || arm64_emulation

rootfs="$(mktemp -d /tmp/testbed-rootfs.XXXXXX)"
cleanup() { rm -rf --one-file-system "$rootfs"; }
trap cleanup EXIT

# The official image's dpkg and apt settings (debuerreotype's minimizing config): no
# fsync per file (a container's files need no crash safety), compressed and
# English-only package lists, apt's downloads deleted after each install. They go in
# between debootstrap's two stages, so that its own dpkg runs already skip the fsyncs:
# on a loaded machine that is most of the time of building this image.
minimize() {  # minimize ROOTFS
    mkdir -p "$1/etc/dpkg/dpkg.cfg.d" "$1/etc/apt/apt.conf.d"
    echo 'force-unsafe-io' >"$1/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
    cat >"$1/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    echo 'Acquire::Languages "none";' >"$1/etc/apt/apt.conf.d/docker-no-languages"
    printf 'Acquire::GzipIndexes "true";\nAcquire::CompressionTypes::Order:: "gz";\n' \
        >"$1/etc/apt/apt.conf.d/docker-gzip-indexes"
    printf 'Apt::AutoRemove::SuggestsImportant "false";\n' \
        >"$1/etc/apt/apt.conf.d/docker-autoremove-suggests"
}

log="$rootfs.log"
if ! { debootstrap --foreign --arch="$ARCH" --variant=minbase "$SUITE" "$rootfs" "$DEBIAN_MIRROR" \
        && minimize "$rootfs" \
        && chroot "$rootfs" /debootstrap/debootstrap --second-stage; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "debootstrap of $SUITE from $DEBIAN_MIRROR failed (full log: $log)"
fi
rm -f "$log"

# Slim it the way the official -slim image is: no apt lists or caches, no logs.
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
       "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/* "$rootfs"/tmp/* \
       "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
# The official image points apt at the standard mirror; keep that unless overridden.
echo "deb $DEBIAN_MIRROR $SUITE main" >"$rootfs/etc/apt/sources.list"
# Official images keep no recommends and no docs; mirror that for later apt-get installs.
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
EOF

if ! tar -C "$rootfs" -c . | docker import --platform "linux/$ARCH" \
        --change 'CMD ["bash"]' \
        --change 'ENV LANG=C.UTF-8' \
        --message "debootstrap --arch=$ARCH --variant=minbase $SUITE $DEBIAN_MIRROR" \
        - "$BASE_IMAGE" >/dev/null; then
    die "docker import of the debootstrapped tree failed"
fi
if [ "$ARCH" != "$HOST_ARCH" ]; then
    # Docker 20.10 records the host's architecture on an import whatever --platform says
    # (the flag needs the experimental daemon): the image's config is set to ARCH, so
    # that it and every image built FROM it say linux/ARCH (compose's `platform:` and
    # `docker image inspect` read it).
    imported="$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")"
    if [ "$(docker image inspect -f '{{.Architecture}}' "$BASE_IMAGE")" != "$ARCH" ]; then
        saved="$rootfs.image"
        mkdir -p "$saved"
        docker save "$BASE_IMAGE" | tar -C "$saved" -x
        python3 - "$saved" "$ARCH" <<'PY'
import hashlib, json, sys
from pathlib import Path
folder, arch = Path(sys.argv[1]), sys.argv[2]
manifest = json.loads((folder / "manifest.json").read_text())
old = folder / manifest[0]["Config"]
config = json.loads(old.read_text())
config["architecture"] = arch
data = json.dumps(config, separators=(",", ":")).encode()
old.unlink()
name = hashlib.sha256(data).hexdigest() + ".json"
(folder / name).write_bytes(data)
manifest[0]["Config"] = name
(folder / "manifest.json").write_text(json.dumps(manifest))
PY
        tar -C "$saved" -c . | docker load -q >/dev/null || die "docker load of the $ARCH base image failed"
        rm -rf "$saved"
        docker rmi "$imported" >/dev/null 2>&1 || true
    fi
fi
echo "base image $BASE_IMAGE: built with debootstrap ($SUITE $ARCH, $DEBIAN_MIRROR)"
