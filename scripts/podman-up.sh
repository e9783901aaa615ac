#!/usr/bin/env bash
# Podman's Docker-compatible API for drover's container backend: its tests, its
# demo and docs/containers.md's set-up (no Docker daemon is needed).
#
#   bash scripts/podman-up.sh [DIR]      (DIR: $DROVER_PODMAN_DIR, else /tmp/drover-podman)
#
# $DROVER_PODMAN_REGISTRY (host:port) names a plain-HTTP registry the service may
# pull from (the tests serve one on 127.0.0.1); it is written to DIR/registries.conf.
#
# Idempotent: installs Debian's podman, runc and busybox-static when missing,
# writes a project-owned containers.conf and storage.conf in DIR (never /etc),
# starts `podman system service` on DIR/podman.sock unless it answers already,
# and builds the test image localhost/drover-test:latest from busybox-static
# with `podman import` (no registry is needed). Prints the socket URL last.
# Exits non-zero, saying why, when podman cannot run a container. Needs root.
#
# Why the configuration: podman's default runtime crun fails on hosts whose
# cgroups are in hybrid mode, runc works; and podman as root asks for
# RLIMIT_NOFILE/RLIMIT_NPROC above what a sandbox allows, so every container
# would fail with "setrlimit ... operation not permitted" without default_ulimits
# inside this shell's own hard limits.
set -euo pipefail

DIR=${1:-${DROVER_PODMAN_DIR:-/tmp/drover-podman}}
IMAGE=localhost/drover-test:latest
WAIT_SECONDS=${PODMAN_UP_WAIT:-60}
APT_GET=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)

say() { echo "podman-up: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (it installs packages and runs podman as root)"

# -- packages ---------------------------------------------------------------------
if ! command -v podman >/dev/null || ! command -v runc >/dev/null \
    || [ ! -x /bin/busybox ] || ! command -v curl >/dev/null; then
    say "installing podman runc busybox-static curl"
    "${APT_GET[@]}" update -qq
    "${APT_GET[@]}" install -y -qq --no-install-recommends podman runc busybox-static curl \
        >/dev/null || die "could not install podman runc busybox-static curl"
fi

# -- configuration ------------------------------------------------------------------
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
limit() {  # the smaller of a hard limit and a cap ("unlimited" counts as the cap)
    local hard=$1 cap=$2
    if [ "$hard" = unlimited ] || [ "$hard" -gt "$cap" ]; then echo "$cap"; else echo "$hard"; fi
}
# runc refuses an nproc limit close to the hard one in some sandboxes: half of it.
hard_u=$(ulimit -Hu)
[ "$hard_u" = unlimited ] || hard_u=$((hard_u / 2))
NOFILE=$(limit "$(ulimit -Hn)" 65536)
NPROC=$(limit "$hard_u" 32768)
cat >"$DIR/containers.conf" <<EOF
# Written by drover's scripts/podman-up.sh (CONTAINERS_CONF points here).
[containers]
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
cat >"$DIR/storage.conf" <<EOF
# Written by drover's scripts/podman-up.sh (CONTAINERS_STORAGE_CONF points here).
[storage]
driver = "overlay"
runroot = "$DIR/run"
graphroot = "$DIR/storage"
EOF
{
    echo "# Written by drover's scripts/podman-up.sh (CONTAINERS_REGISTRIES_CONF points here)."
    echo 'unqualified-search-registries = []'
    if [ -n "${DROVER_PODMAN_REGISTRY:-}" ]; then
        printf '[[registry]]\nlocation = "%s"\ninsecure = true\n' "$DROVER_PODMAN_REGISTRY"
    fi
} >"$DIR/registries.conf"
cat >"$DIR/env" <<EOF
export CONTAINERS_CONF=$DIR/containers.conf
export CONTAINERS_STORAGE_CONF=$DIR/storage.conf
export CONTAINERS_REGISTRIES_CONF=$DIR/registries.conf
EOF
export CONTAINERS_CONF=$DIR/containers.conf CONTAINERS_STORAGE_CONF=$DIR/storage.conf
export CONTAINERS_REGISTRIES_CONF=$DIR/registries.conf

# -- the service ----------------------------------------------------------------------
SOCK=$DIR/podman.sock
answers() { curl -sf --max-time 5 --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1; }
if ! answers; then
    if [ -f "$DIR/service.pid" ] && kill -0 "$(cat "$DIR/service.pid")" 2>/dev/null; then
        kill "$(cat "$DIR/service.pid")" || true
    fi
    rm -f "$SOCK"
    say "starting podman system service on $SOCK"
    setsid podman system service --time=0 "unix://$SOCK" >"$DIR/service.log" 2>&1 </dev/null &
    echo $! >"$DIR/service.pid"
    deadline=$((SECONDS + WAIT_SECONDS))
    until answers; do
        if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$(cat "$DIR/service.pid")" 2>/dev/null; then
            tail -n 20 "$DIR/service.log" >&2 || true
            die "podman system service did not answer on $SOCK"
        fi
        sleep 0.2
    done
fi

# -- the test image ----------------------------------------------------------------------
if ! podman image exists "$IMAGE"; then
    say "building $IMAGE from busybox-static"
    root=$(mktemp -d)
    trap 'rm -rf "$root"' EXIT
    mkdir -p "$root/bin" "$root/tmp" "$root/www"
    cp /bin/busybox "$root/bin/busybox"
    for applet in $("$root/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    echo "drover test image" >"$root/www/index.html"
    tar -C "$root" -c . | podman import \
        --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' - "$IMAGE" >/dev/null \
        || die "podman import of $IMAGE failed"
fi
if ! out=$(podman run --rm "$IMAGE" /bin/echo ready 2>&1) || [ "$out" != ready ]; then
    die "podman cannot run a container: $out"
fi
say "up: $IMAGE on unix://$SOCK (env: $DIR/env)"
echo "unix://$SOCK"
