#!/usr/bin/env bash
# Ensure the local base image debian:bookworm-slim exists.
#
# Every Dockerfile in this repository starts FROM debian:bookworm-slim so that a user
# with a registry gets the ordinary image. Where no registry is reachable (this
# project's own machines) the image is made from Debian packages instead: a minbase
# debootstrap into a temporary folder, cleaned of apt caches, then `docker import`ed
# under the same name. Idempotent: an existing image is left alone.
#
# Environment:
#   BASE_IMAGE     image to ensure (default debian:bookworm-slim)
#   DEBIAN_MIRROR  mirror for debootstrap (default http://deb.debian.org/debian)
#   SUITE          Debian suite (default bookworm)
set -euo pipefail

BASE_IMAGE="${BASE_IMAGE:-debian:bookworm-slim}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE="${SUITE:-bookworm}"

die() { echo "build-base-image: error: $*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found; install Docker Engine first"
docker info >/dev/null 2>&1 || die "cannot talk to the Docker daemon (is it running? are you in the docker group?)"

if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    exit 0
fi

pull_log="$(mktemp)"
if docker pull -q "$BASE_IMAGE" >"$pull_log" 2>&1; then
    rm -f "$pull_log"
    echo "base image $BASE_IMAGE: pulled"
    exit 0
fi
echo "base image $BASE_IMAGE: pull failed ($(tail -n1 "$pull_log")); building it with debootstrap" >&2
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
if ! { debootstrap --foreign --variant=minbase "$SUITE" "$rootfs" "$DEBIAN_MIRROR" \
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

if ! tar -C "$rootfs" -c . | docker import \
        --change 'CMD ["bash"]' \
        --change 'ENV LANG=C.UTF-8' \
        --message "debootstrap --variant=minbase $SUITE $DEBIAN_MIRROR" \
        - "$BASE_IMAGE" >/dev/null; then
    die "docker import of the debootstrapped tree failed"
fi
echo "base image $BASE_IMAGE: built with debootstrap ($SUITE, $DEBIAN_MIRROR)"
