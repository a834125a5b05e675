#!/usr/bin/env bash
# Export the images a node needs (the node agent's and every experiment's) as archives
# for the playbook's images role: nodes then need no registry, and the control host no
# open port. Run after scripts/build-images.sh, from anywhere:
#
#   deploy/ansible/export-images.sh            # into build/images/
#   deploy/ansible/export-images.sh tat        # the agent and only these experiments
#   OUT=/srv/testbed-images TAG=v1 deploy/ansible/export-images.sh
#
# Writes one <name>.tar.gz per image (gzip -n: the same image gives the same bytes, so an
# unchanged image is not sent again) and images.yml, the list the role loads from.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TAG="${TAG:-dev}"
OUT="${OUT:-$ROOT/build/images}"

die() { echo "export-images: error: $*" >&2; exit 1; }
command -v docker >/dev/null 2>&1 || die "docker CLI not found"

images=("testbed/node:$TAG")
manifests=()
if [ "$#" -gt 0 ]; then
    for name in "$@"; do
        [ -f "$ROOT/experiments/$name/experiment.yaml" ] \
            || die "unknown experiment '$name' (one of: $(cd "$ROOT/experiments" && ls -d */ | tr -d / | tr '\n' ' '))"
        manifests+=("$ROOT/experiments/$name/experiment.yaml")
    done
else
    manifests=("$ROOT"/experiments/*/experiment.yaml)
fi
for manifest in "${manifests[@]}"; do
    image="$(sed -n -E 's/^image:[[:space:]]*["'\'']?([^"'\''[:space:]#]+)["'\'']?.*$/\1/p' "$manifest" | head -n1)"
    [ -n "$image" ] || die "$manifest has no image: key"
    images+=("$image")
done

mkdir -p "$OUT"
list="$OUT/images.yml.part"
echo "# Written by deploy/ansible/export-images.sh: archive -> the image it holds." >"$list"
echo "testbed_image_list:" >>"$list"
for image in "${images[@]}"; do
    docker image inspect "$image" >/dev/null 2>&1 \
        || die "image $image is missing: run scripts/build-images.sh first (TAG=$TAG)"
    file="$(echo "$image" | tr '/:' '__').tar.gz"
    id="$(docker image inspect -f '{{.Id}}' "$image")"
    # Re-export only when the image changed (its id is kept beside the archive).
    if [ "$(cat "$OUT/$file.id" 2>/dev/null)" != "$id" ] || [ ! -f "$OUT/$file" ]; then
        docker save "$image" | gzip -n -1 >"$OUT/$file.part"
        mv "$OUT/$file.part" "$OUT/$file"
        echo "$id" >"$OUT/$file.id"
        echo "exported $image -> $OUT/$file ($(du -h "$OUT/$file" | cut -f1))"
    else
        echo "unchanged $image ($OUT/$file)"
    fi
    printf '  - {archive: %s, image: "%s", id: "%s"}\n' "$file" "$image" "$id" >>"$list"
done
mv "$list" "$OUT/images.yml"
echo "wrote $OUT/images.yml (${#images[@]} images)"
