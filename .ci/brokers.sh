#!/usr/bin/env bash
# .ci/brokers.sh - make sure the two RabbitMQ brokers hopper's tests use are up.
#
#   broker      version                  AMQP             management HTTP   node name          dist port
#   system      3.10 (Debian bookworm)   127.0.0.1:5672   127.0.0.1:15672   rabbit@localhost   25672
#   rabbitmq4   4.0  (Debian trixie)     127.0.0.1:5673   127.0.0.1:15673   rabbit40@localhost 25673
#
# Both accept guest/guest. The 4.0 broker runs from a debootstrapped trixie tree
# outside the checkout (HOPPER_RABBITMQ4_ROOT, default /var/lib/hopper-ci/trixie),
# built once and reused by later runs / fresh clones; it shares the host's epmd.
#
# Idempotent: a second run on a healthy machine only does a few HTTP probes.
# Needs root and network access to the Debian mirror on first run only.
#
# Env knobs:
#   HOPPER_SKIP_RABBITMQ4=1   only ensure the system (3.10) broker
#   HOPPER_RABBITMQ4_ROOT     where the trixie tree lives
#   HOPPER_DEBIAN_MIRROR      mirror for debootstrap (default http://deb.debian.org/debian)
#   HOPPER_CI_LOG             where command output goes (default /var/lib/hopper-ci/brokers.log)
#
# Prints only short progress lines on stderr (and the tail of the log on failure);
# nothing on stdout.
set -euo pipefail

R4_ROOT=${HOPPER_RABBITMQ4_ROOT:-/var/lib/hopper-ci/trixie}
R4_ROOT=${R4_ROOT%/}
MIRROR=${HOPPER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
LOG=${HOPPER_CI_LOG:-/var/lib/hopper-ci/brokers.log}

SYS_AMQP=5672 SYS_HTTP=15672
R4_NODE=rabbit40@localhost R4_AMQP=5673 R4_HTTP=15673 R4_DIST=25673
WAIT_SECS=${HOPPER_BROKER_WAIT_SECS:-90}

export LC_ALL=C

say() { printf 'brokers: %s\n' "$*" >&2; }
die() {
    say "ERROR: $*"
    if [[ -s $LOG ]]; then
        say "last lines of $LOG:"
        tail -n 25 "$LOG" | sed 's/^/  | /' >&2 || true
    fi
    exit 1
}
# Run a noisy command with its output in the log; never inherit our stdio or the lock fd
# (a daemonised beam.smp must not hold CI's pipes or the lock open).
quiet() { "$@" </dev/null >>"$LOG" 2>&1 9>&-; }

[[ $(id -u) -eq 0 ]] || die "must run as root"
mkdir -p "$(dirname "$LOG")"

# One run at a time (two concurrent debootstraps into the same place would be a mess). The log
# is emptied only once we hold the lock, so a waiting run cannot wipe the running one's log.
mkdir -p "$(dirname "$R4_ROOT")"
exec 9>"$(dirname "$R4_ROOT")/.brokers.lock"
flock -w 900 9 || die "another brokers.sh still holds $(dirname "$R4_ROOT")/.brokers.lock"
: >"$LOG"

http_code() { # port path
    curl -s -o /dev/null -w '%{http_code}' -u guest:guest --max-time 5 \
        "http://127.0.0.1:$1$2" 2>/dev/null || true
}
api_version() { # port -> rabbitmq_version from /api/overview, or empty
    curl -s -u guest:guest --max-time 5 "http://127.0.0.1:$1/api/overview" 2>/dev/null |
        sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p' || true
}
tcp_open() { timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
port_busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

APT_UPDATED=
apt_install() {
    if [[ -z $APT_UPDATED ]]; then
        say "apt-get update"
        DEBIAN_FRONTEND=noninteractive quiet apt-get update || die "apt-get update failed"
        APT_UPDATED=1
    fi
    say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive quiet apt-get install -y --no-install-recommends "$@" ||
        die "apt-get install $* failed"
}

wait_http_ok() { # port what
    local i
    for ((i = 0; i < WAIT_SECS; i++)); do
        [[ $(http_code "$1" /api/overview) == 200 ]] && return 0
        sleep 1
    done
    return 1
}

# --------------------------------------------------------------------------------------
# 1. System broker (Debian bookworm rabbitmq-server 3.10) on 5672 / 15672
# --------------------------------------------------------------------------------------
ensure_system_broker() {
    if [[ $(http_code $SYS_HTTP /api/overview) == 200 ]] && tcp_open $SYS_AMQP; then
        say "system broker: up ($(api_version $SYS_HTTP)) amqp=127.0.0.1:$SYS_AMQP http=127.0.0.1:$SYS_HTTP"
        return 0
    fi

    [[ -x /usr/sbin/rabbitmq-server ]] || apt_install rabbitmq-server

    if ! quiet rabbitmq-diagnostics -q ping; then
        say "system broker: starting (rabbitmq-server -detached)"
        quiet rabbitmq-server -detached || die "rabbitmq-server -detached failed"
        local i
        for ((i = 0; i < 60; i++)); do
            quiet rabbitmq-diagnostics -q ping && break
            sleep 1
        done
    fi
    quiet rabbitmqctl -q await_startup --timeout 120 ||
        die "system broker did not finish booting (see /var/log/rabbitmq/)"

    if ! quiet rabbitmq-plugins -q is_enabled rabbitmq_management; then
        say "system broker: enabling rabbitmq_management"
        quiet rabbitmq-plugins enable rabbitmq_management || die "rabbitmq-plugins enable failed"
    fi

    wait_http_ok $SYS_HTTP ||
        die "system broker: http://127.0.0.1:$SYS_HTTP/api/overview not 200 after ${WAIT_SECS}s"
    tcp_open $SYS_AMQP || die "system broker: nothing accepts AMQP on 127.0.0.1:$SYS_AMQP"
    say "system broker: up ($(api_version $SYS_HTTP)) amqp=127.0.0.1:$SYS_AMQP http=127.0.0.1:$SYS_HTTP"
}

# --------------------------------------------------------------------------------------
# 2. RabbitMQ 4.0 from Debian trixie in a chroot, on 5673 / 15673
# --------------------------------------------------------------------------------------
in_r4() { # run a command inside the tree with a clean environment
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive chroot "$R4_ROOT" "$@"
}

# Unmount everything mounted below $1 (deepest first).
umount_below() {
    local dir=$1 m
    while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r)
}

# Kill processes whose root directory is $1 (a rogue node started by a postinst, say).
kill_procs_in() {
    local dir=$1 p pids=()
    for p in /proc/[0-9]*; do
        [[ $(readlink "$p/root" 2>/dev/null) == "$dir" ]] && pids+=("${p#/proc/}")
    done
    ((${#pids[@]})) || return 0
    kill "${pids[@]}" 2>/dev/null || true
    sleep 2
    kill -9 "${pids[@]}" 2>/dev/null || true
}

build_r4_tree() {
    local tmp="$R4_ROOT.partial"
    command -v debootstrap >/dev/null || apt_install debootstrap
    if [[ ! -e /usr/share/debootstrap/scripts/trixie ]]; then
        ln -s sid /usr/share/debootstrap/scripts/trixie
    fi

    if [[ -e $tmp ]]; then
        say "rabbitmq4: removing half-built $tmp"
        kill_procs_in "$tmp"
        umount_below "$tmp"
        rm -rf --one-file-system "$tmp"
    fi

    say "rabbitmq4: debootstrap trixie into $tmp (first run only, a few minutes)"
    quiet debootstrap --variant=minbase trixie "$tmp" "$MIRROR" || die "debootstrap trixie failed"

    # No service may start while packages are installed: it would take the system
    # broker's ports (5672/25672) or leave a stray node behind.
    printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
    chmod 755 "$tmp/usr/sbin/policy-rc.d"

    # Give the tree's rabbitmq user the host rabbitmq user's uid/gid, so the 4.0 node's
    # processes show up as "rabbitmq" on the host (otherwise it gets whatever system uid
    # is next in the tree, which on the host belongs to e.g. postgres).
    local huid hgid
    if huid=$(id -u rabbitmq 2>/dev/null) && hgid=$(id -g rabbitmq 2>/dev/null); then
        if ! awk -F: -v u="$huid" '$3 == u { f = 1 } END { exit !f }' "$tmp/etc/passwd" &&
            ! awk -F: -v g="$hgid" '$3 == g { f = 1 } END { exit !f }' "$tmp/etc/group"; then
            if ! { quiet chroot "$tmp" groupadd -r -g "$hgid" rabbitmq &&
                quiet chroot "$tmp" useradd -r -u "$huid" -g rabbitmq -d /var/lib/rabbitmq \
                    -M -s /usr/sbin/nologin -c "RabbitMQ messaging server" rabbitmq; }; then
                say "rabbitmq4: (could not pre-create rabbitmq user with host ids; continuing)"
            fi
        fi
    fi

    mountpoint -q "$tmp/proc" || mount -t proc proc "$tmp/proc"
    say "rabbitmq4: apt-get install rabbitmq-server (trixie)"
    local ok=1
    quiet env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive chroot "$tmp" sh -c \
        'apt-get update && apt-get install -y --no-install-recommends rabbitmq-server && apt-get clean' ||
        ok=
    kill_procs_in "$tmp"
    umount_below "$tmp"
    [[ -n $ok ]] || die "installing rabbitmq-server inside $tmp failed"
    [[ -x $tmp/usr/sbin/rabbitmq-server ]] || die "no usr/sbin/rabbitmq-server in $tmp"

    rm -rf --one-file-system "$R4_ROOT"
    mv "$tmp" "$R4_ROOT"
    say "rabbitmq4: tree ready at $R4_ROOT"
}

write_if_changed() { # file content
    if [[ ! -f $1 ]] || [[ $(cat "$1") != "$2" ]]; then
        printf '%s\n' "$2" >"$1"
        chmod 644 "$1"
    fi
}

configure_r4() {
    local etc="$R4_ROOT/etc/rabbitmq"
    mkdir -p "$etc"
    write_if_changed "$etc/rabbitmq.conf" "# written by hopper .ci/brokers.sh
listeners.tcp.default = 127.0.0.1:$R4_AMQP
management.tcp.ip = 127.0.0.1
management.tcp.port = $R4_HTTP
loopback_users = none"
    write_if_changed "$etc/rabbitmq-env.conf" "# written by hopper .ci/brokers.sh
NODENAME=$R4_NODE
NODE_IP_ADDRESS=127.0.0.1
NODE_PORT=$R4_AMQP
DIST_PORT=$R4_DIST
ERL_EPMD_ADDRESS=127.0.0.1
SERVER_ADDITIONAL_ERL_ARGS=\"-kernel inet_dist_use_interface {127,0,0,1}\""
    write_if_changed "$etc/enabled_plugins" "[rabbitmq_management]."

    grep -qsE '^127\.0\.0\.1[[:space:]].*\blocalhost\b' "$R4_ROOT/etc/hosts" ||
        printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >>"$R4_ROOT/etc/hosts"

    # One Erlang cookie for the node (runs as rabbitmq, HOME=/var/lib/rabbitmq) and for
    # CLI tools run as root inside the tree (HOME=/root).
    local cookie="$R4_ROOT/var/lib/rabbitmq/.erlang.cookie"
    if [[ ! -s $cookie ]]; then
        mkdir -p "$R4_ROOT/var/lib/rabbitmq"
        od -An -N20 -tx1 /dev/urandom | tr -d ' \n' >"$cookie"
        in_r4 chown rabbitmq:rabbitmq /var/lib/rabbitmq/.erlang.cookie
        chmod 400 "$cookie"
    fi
    if ! cmp -s "$cookie" "$R4_ROOT/root/.erlang.cookie"; then
        install -m 400 -o root -g root "$cookie" "$R4_ROOT/root/.erlang.cookie"
    fi
}

r4_healthy() {
    [[ $(api_version $R4_HTTP) == 4.* ]] && tcp_open $R4_AMQP
}

ensure_rabbitmq4() {
    if r4_healthy; then
        say "rabbitmq4: up ($(api_version $R4_HTTP)) node=$R4_NODE amqp=127.0.0.1:$R4_AMQP http=127.0.0.1:$R4_HTTP"
        return 0
    fi

    [[ -x $R4_ROOT/usr/sbin/rabbitmq-server ]] || build_r4_tree
    configure_r4
    mountpoint -q "$R4_ROOT/proc" || mount -t proc proc "$R4_ROOT/proc" ||
        die "cannot mount /proc in $R4_ROOT"

    if ! quiet in_r4 rabbitmq-diagnostics -q -n "$R4_NODE" ping; then
        local p
        for p in $R4_AMQP $R4_HTTP $R4_DIST; do
            port_busy "$p" && die "rabbitmq4: port $p is taken by something else ($(ss -Hltnp "sport = :$p" | head -n1))"
        done
        say "rabbitmq4: starting $R4_NODE (chroot $R4_ROOT rabbitmq-server -detached)"
        quiet in_r4 rabbitmq-server -detached || die "chroot rabbitmq-server -detached failed (logs: $R4_ROOT/var/log/rabbitmq/)"
    fi

    local i
    for ((i = 0; i < WAIT_SECS; i++)); do
        r4_healthy && break
        sleep 1
    done
    r4_healthy || die "rabbitmq4: http://127.0.0.1:$R4_HTTP/api/overview (4.x) or AMQP 127.0.0.1:$R4_AMQP not up after ${WAIT_SECS}s (logs: $R4_ROOT/var/log/rabbitmq/)"
    say "rabbitmq4: up ($(api_version $R4_HTTP)) node=$R4_NODE amqp=127.0.0.1:$R4_AMQP http=127.0.0.1:$R4_HTTP"
}

command -v curl >/dev/null || apt_install curl ca-certificates

ensure_system_broker
if [[ ${HOPPER_SKIP_RABBITMQ4:-0} == 1 ]]; then
    say "rabbitmq4: skipped (HOPPER_SKIP_RABBITMQ4=1)"
else
    ensure_rabbitmq4
fi
