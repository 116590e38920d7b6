#!/usr/bin/env bash
# .ci/brokers.sh - make sure the three RabbitMQ brokers hopper's tests use are up.
#
#   broker      version                  AMQP             management HTTP   node name          dist port
#   system      3.10 (Debian bookworm)   127.0.0.1:5672   127.0.0.1:15672   rabbit@localhost   25672
#   rabbitmq40  4.0  (Debian trixie)     127.0.0.1:5673   127.0.0.1:15673   rabbit40@localhost 25673
#   rabbitmq43  4.3  (Debian sid)        127.0.0.1:5674   127.0.0.1:15674   rabbit43@localhost 25674
#
# and, from the trixie tree (4.0), three TLS-only nodes for the TLS tests, each with AMQPS and
# HTTPS management on 127.0.0.1, with certificates made here by openssl (a test CA, a server
# certificate for `localhost` only, a client certificate, a server certificate that expired in
# 2020) in $HOPPER_RABBITMQ4_ROOT/etc/rabbitmq/hopper-tls:
#
#   node        client certificate                  AMQPS            HTTPS             node name            dist port
#   tls         asked for, optional (verify_peer)   127.0.0.1:5671   127.0.0.1:15671   rabbittls@localhost  25675
#   mtls        required (fail_if_no_peer_cert)     127.0.0.1:5675   127.0.0.1:15675   rabbitmtls@localhost 25676
#   expired     optional; its own certificate expired  127.0.0.1:5676 127.0.0.1:15676  rabbitexp@localhost  25677
#
# All accept guest/guest and have the management plugin on; the 4.0 and 4.3 brokers also run
# rabbitmq_shovel and rabbitmq_shovel_management (scripts/bench --move times the management UI's
# "move messages" against hopper redrive). The system 3.10 broker's configuration is never changed. The 4.0 and 4.3 brokers run
# (under chroot) from debootstrapped Debian trees outside the checkout (HOPPER_RABBITMQ4_ROOT,
# default /var/lib/hopper-ci/trixie, and HOPPER_RABBITMQ43_ROOT, default /var/lib/hopper-ci/sid),
# built once and reused by later runs / fresh clones; they share the host's epmd.
#
# Idempotent: a second run on a healthy machine only does a few HTTP probes.
# Needs root and network access to the Debian mirror on first run only.
#
# Env knobs:
#   HOPPER_SKIP_RABBITMQ4=1    only ensure the system (3.10) broker (skips 4.0 and 4.3)
#   HOPPER_SKIP_RABBITMQ43=1   skip only the 4.3 broker
#   HOPPER_SKIP_TLS=1          skip the TLS nodes
#   HOPPER_RABBITMQ4_ROOT      where the trixie tree (4.0) lives
#   HOPPER_RABBITMQ43_ROOT     where the sid tree (4.3) lives
#   HOPPER_DEBIAN_MIRROR       mirror for debootstrap (default: the Debian archive the host's
#                              apt sources use, else http://deb.debian.org/debian)
#   HOPPER_BROKER_WAIT_SECS    how long to wait for a broker to come up (default 90)
#   HOPPER_CI_LOG              where command output goes (default /var/lib/hopper-ci/brokers.log)
#
# Prints only short progress lines on stderr (and the tail of the log on failure);
# nothing on stdout.
set -euo pipefail

R40_ROOT=${HOPPER_RABBITMQ4_ROOT:-/var/lib/hopper-ci/trixie}
R40_ROOT=${R40_ROOT%/}
R43_ROOT=${HOPPER_RABBITMQ43_ROOT:-/var/lib/hopper-ci/sid}
R43_ROOT=${R43_ROOT%/}
LOG=${HOPPER_CI_LOG:-/var/lib/hopper-ci/brokers.log}

SYS_AMQP=5672 SYS_HTTP=15672
# Chroot brokers, as ensure_tree_broker takes them: label suite root node amqp http dist version
R40=(rabbitmq40 trixie "$R40_ROOT" rabbit40@localhost 5673 15673 25673 4.0)
R43=(rabbitmq43 sid    "$R43_ROOT" rabbit43@localhost 5674 15674 25674 4.3)
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
mkdir -p "$(dirname "$R40_ROOT")"
exec 9>"$(dirname "$R40_ROOT")/.brokers.lock"
flock -w 900 9 || die "another brokers.sh still holds $(dirname "$R40_ROOT")/.brokers.lock"
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
        DEBIAN_FRONTEND=noninteractive quiet apt-get -o DPkg::Lock::Timeout=600 update || die "apt-get update failed"
        APT_UPDATED=1
    fi
    say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive quiet apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "$@" ||
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
# 2. Newer RabbitMQs from Debian trees (trixie: 4.0, sid: 4.3) run under chroot
# --------------------------------------------------------------------------------------
in_tree() { # root command... : run a command inside a tree with a clean environment
    local root=$1
    shift
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive chroot "$root" "$@"
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

# The main Debian archive the host's own apt uses (so debootstrap goes through the same,
# reachable mirror): the first enabled "deb" entry in sources.list, then sources.list.d/*.list
# and *.sources (deb822) in apt's order, with an http(s) URL, component main and a Debian
# suite (the host's codename or an alias, with -updates/-backports allowed); security and
# snapshot (date-pinned) archives are skipped. Prints nothing on a non-Debian host.
host_debian_mirror() {
    local f codename files=()
    [[ $(sed -n 's/^ID=//p' /etc/os-release 2>/dev/null | tr -d '"') == debian ]] || return 0
    codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release | tr -d '"')
    [[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
    for f in /etc/apt/sources.list.d/*; do
        [[ -f $f && ( $f == *.list || $f == *.sources ) ]] && files+=("$f")
    done
    ((${#files[@]})) || return 0
    awk -v codename="$codename" '
        function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
        function has_word(list, w) { return (" " list " ") ~ ("[ \t]" w "[ \t]") }
        function debian_suite(s) {
            sub(/-(updates|backports|backports-sloppy|proposed-updates)$/, "", s)
            return (codename != "" && s == codename) ||
                s ~ /^(oldoldstable|oldstable|stable|testing|unstable|sid|experimental)$/
        }
        function consider(types, uris, suites, comps, enabled,   a, n, i, uri, good) {
            if (found != "" || tolower(enabled) ~ /^(no|false)$/ || !has_word(types, "deb")) return
            split(trim(uris), a, /[ \t]+/)
            uri = a[1]
            if (uri !~ /^https?:\/\// || uri ~ /security|snapshot\.debian\.org/) return
            if (!has_word(comps, "main")) return
            n = split(trim(suites), a, /[ \t]+/)
            good = 0
            for (i = 1; i <= n; i++) {
                if (a[i] ~ /-security$/) return
                if (debian_suite(a[i])) good = 1
            }
            if (!good) return
            sub(/\/+$/, "", uri)
            found = uri
        }
        function flush() {
            if (F["uris"] != "") consider(F["types"], F["uris"], F["suites"], F["components"], F["enabled"])
            split("", F)
            key = ""
        }
        FNR == 1 { flush(); deb822 = FILENAME ~ /\.sources$/ }
        !deb822 {
            line = $0
            sub(/#.*/, "", line)
            gsub(/\[[^]]*\]/, " ", line)
            n = split(trim(line), w, /[ \t]+/)
            if (n < 4) next
            comps = w[4]
            for (i = 5; i <= n; i++) comps = comps " " w[i]
            consider(w[1], w[2], w[3], comps, "")
            next
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[ \t]/ { if (key != "") F[key] = F[key] " " trim($0); next }
        {
            i = index($0, ":")
            if (!i) next
            key = tolower(trim(substr($0, 1, i - 1)))
            F[key] = trim(substr($0, i + 1))
        }
        END { flush(); if (found != "") print found }
    ' "${files[@]}" 2>/dev/null || true
}

debian_mirror() {
    local m=${HOPPER_DEBIAN_MIRROR:-}
    [[ -n $m ]] || m=$(host_debian_mirror)
    printf '%s\n' "${m:-http://deb.debian.org/debian}"
}

build_tree() { # label suite root
    local label=$1 suite=$2 root=$3
    local tmp="$root.partial" mirror
    command -v debootstrap >/dev/null || apt_install debootstrap
    # An older debootstrap may not know a newer suite; they all use the sid script.
    if [[ ! -e /usr/share/debootstrap/scripts/$suite ]]; then
        ln -s sid "/usr/share/debootstrap/scripts/$suite"
    fi

    if [[ -e $tmp ]]; then
        say "$label: removing half-built $tmp"
        kill_procs_in "$tmp"
        umount_below "$tmp"
        rm -rf --one-file-system "$tmp"
    fi

    mirror=$(debian_mirror)
    say "$label: debootstrap $suite into $tmp from $mirror (first run only, a few minutes)"
    quiet debootstrap --variant=minbase "$suite" "$tmp" "$mirror" || die "debootstrap $suite failed"

    # No service may start while packages are installed: it would take the system
    # broker's ports (5672/25672) or leave a stray node behind.
    printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
    chmod 755 "$tmp/usr/sbin/policy-rc.d"

    # The tree's apt talks to the host's mirror, so it gets the host apt's settings for it: a
    # mirror that serves a frozen snapshot needs Check-Valid-Until "false" (sid's Release
    # file expires after a week, so apt would refuse it), one behind a proxy needs the proxy.
    apt-config dump 2>/dev/null |
        grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy(::[^ ]+)?) ' \
            >"$tmp/etc/apt/apt.conf.d/99hopper-host-acquire" || true

    # Give the tree's rabbitmq user the host rabbitmq user's uid/gid, so the node's
    # processes show up as "rabbitmq" on the host (otherwise it gets whatever system uid
    # is next in the tree, which on the host belongs to e.g. postgres).
    local huid hgid
    if huid=$(id -u rabbitmq 2>/dev/null) && hgid=$(id -g rabbitmq 2>/dev/null); then
        if ! awk -F: -v u="$huid" '$3 == u { f = 1 } END { exit !f }' "$tmp/etc/passwd" &&
            ! awk -F: -v g="$hgid" '$3 == g { f = 1 } END { exit !f }' "$tmp/etc/group"; then
            if ! { quiet chroot "$tmp" groupadd -r -g "$hgid" rabbitmq &&
                quiet chroot "$tmp" useradd -r -u "$huid" -g rabbitmq -d /var/lib/rabbitmq \
                    -M -s /usr/sbin/nologin -c "RabbitMQ messaging server" rabbitmq; }; then
                say "$label: (could not pre-create rabbitmq user with host ids; continuing)"
            fi
        fi
    fi

    mountpoint -q "$tmp/proc" || mount -t proc proc "$tmp/proc"
    say "$label: apt-get install rabbitmq-server ($suite)"
    local ok=1
    quiet in_tree "$tmp" sh -c \
        'apt-get update && apt-get install -y --no-install-recommends rabbitmq-server && apt-get clean' ||
        ok=
    kill_procs_in "$tmp"
    umount_below "$tmp"
    [[ -n $ok ]] || die "installing rabbitmq-server inside $tmp failed"
    [[ -x $tmp/usr/sbin/rabbitmq-server ]] || die "no usr/sbin/rabbitmq-server in $tmp"

    rm -rf --one-file-system "$root"
    mv "$tmp" "$root"
    say "$label: tree ready at $root"
}

write_if_changed() { # file content
    if [[ ! -f $1 ]] || [[ $(cat "$1") != "$2" ]]; then
        printf '%s\n' "$2" >"$1"
        chmod 644 "$1"
    fi
}

configure_tree() { # root node amqp http dist
    local root=$1 node=$2 amqp=$3 http=$4 dist=$5
    local etc="$root/etc/rabbitmq"
    mkdir -p "$etc"
    write_if_changed "$etc/rabbitmq.conf" "# written by hopper .ci/brokers.sh
listeners.tcp.default = 127.0.0.1:$amqp
management.tcp.ip = 127.0.0.1
management.tcp.port = $http
loopback_users = none"
    write_if_changed "$etc/rabbitmq-env.conf" "# written by hopper .ci/brokers.sh
NODENAME=$node
NODE_IP_ADDRESS=127.0.0.1
NODE_PORT=$amqp
DIST_PORT=$dist
ERL_EPMD_ADDRESS=127.0.0.1
SERVER_ADDITIONAL_ERL_ARGS=\"-kernel inet_dist_use_interface {127,0,0,1}\""
    write_if_changed "$etc/enabled_plugins" "[rabbitmq_management,rabbitmq_shovel,rabbitmq_shovel_management]."

    # Newer trees (sid) ship no /etc/hosts at all; the node does not boot until localhost resolves.
    grep -qsE '^127\.0\.0\.1[[:space:]].*\blocalhost\b' "$root/etc/hosts" ||
        printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >>"$root/etc/hosts"

    # One Erlang cookie for the node (runs as rabbitmq, HOME=/var/lib/rabbitmq) and for
    # CLI tools run as root inside the tree (HOME=/root).
    local cookie="$root/var/lib/rabbitmq/.erlang.cookie"
    if [[ ! -s $cookie ]]; then
        mkdir -p "$root/var/lib/rabbitmq"
        od -An -N20 -tx1 /dev/urandom | tr -d ' \n' >"$cookie"
        in_tree "$root" chown rabbitmq:rabbitmq /var/lib/rabbitmq/.erlang.cookie
        chmod 400 "$cookie"
    fi
    if ! cmp -s "$cookie" "$root/root/.erlang.cookie"; then
        install -m 400 -o root -g root "$cookie" "$root/root/.erlang.cookie"
    fi
}

tree_broker_healthy() { # http amqp version-prefix ("4.0" matches 4.0 and 4.0.x, not 4.3)
    local v
    v=$(api_version "$1")
    [[ $v == "$3" || $v == "$3".* ]] && tcp_open "$2"
}

# The shovel plugins on a running tree broker (a tree configured before they were in its
# enabled_plugins gets them without a restart). /api/shovels answers once they run.
ensure_tree_plugins() { # label root node http
    local label=$1 root=$2 node=$3 http=$4 i
    [[ $(http_code "$http" /api/shovels) == 200 ]] && return 0
    say "$label: enabling rabbitmq_shovel and rabbitmq_shovel_management"
    quiet in_tree "$root" rabbitmq-plugins -n "$node" enable rabbitmq_shovel rabbitmq_shovel_management ||
        die "$label: rabbitmq-plugins enable rabbitmq_shovel rabbitmq_shovel_management failed"
    for ((i = 0; i < WAIT_SECS; i++)); do
        [[ $(http_code "$http" /api/shovels) == 200 ]] && return 0
        sleep 1
    done
    die "$label: http://127.0.0.1:$http/api/shovels not 200 after ${WAIT_SECS}s"
}

ensure_tree_broker() { # label suite root node amqp http dist version-prefix
    local label=$1 suite=$2 root=$3 node=$4 amqp=$5 http=$6 dist=$7 want=$8
    local up="node=$node amqp=127.0.0.1:$amqp http=127.0.0.1:$http"
    if tree_broker_healthy "$http" "$amqp" "$want"; then
        ensure_tree_plugins "$label" "$root" "$node" "$http"
        say "$label: up ($(api_version "$http")) $up"
        return 0
    fi

    [[ -x $root/usr/sbin/rabbitmq-server ]] || build_tree "$label" "$suite" "$root"
    configure_tree "$root" "$node" "$amqp" "$http" "$dist"
    mountpoint -q "$root/proc" || mount -t proc proc "$root/proc" ||
        die "cannot mount /proc in $root"

    if ! quiet in_tree "$root" rabbitmq-diagnostics -q -n "$node" ping; then
        local p
        for p in "$amqp" "$http" "$dist"; do
            port_busy "$p" && die "$label: port $p is taken by something else ($(ss -Hltnp "sport = :$p" | head -n1))"
        done
        say "$label: starting $node (chroot $root rabbitmq-server -detached)"
        quiet in_tree "$root" rabbitmq-server -detached ||
            die "$label: chroot rabbitmq-server -detached failed (logs: $root/var/log/rabbitmq/)"
    fi

    local i
    for ((i = 0; i < WAIT_SECS; i++)); do
        tree_broker_healthy "$http" "$amqp" "$want" && break
        sleep 1
    done
    tree_broker_healthy "$http" "$amqp" "$want" ||
        die "$label: http://127.0.0.1:$http/api/overview ($want.x) or AMQP 127.0.0.1:$amqp not up after ${WAIT_SECS}s (logs: $root/var/log/rabbitmq/)"
    ensure_tree_plugins "$label" "$root" "$node" "$http"
    say "$label: up ($(api_version "$http")) $up"
}

# --------------------------------------------------------------------------------------
# 3. TLS nodes, from the trixie tree: their own node names, ports, data and config files,
#    beside rabbit40 (whose configuration they never touch)
# --------------------------------------------------------------------------------------
TLS_DIR_IN_TREE=/etc/rabbitmq/hopper-tls
TLS_DIR="$R40_ROOT$TLS_DIR_IN_TREE"
# label node amqps https dist fail_if_no_peer_cert server-certificate
TLS_NODES=(
    "tls rabbittls@localhost 5671 15671 25675 false server"
    "mtls rabbitmtls@localhost 5675 15675 25676 true server"
    "expired rabbitexp@localhost 5676 15676 25677 false expired"
)

# A CA, a server certificate for localhost (a DNS name only: 127.0.0.1 is a host name mismatch,
# which the tests use), a client certificate, and a server certificate that expired in 2020.
# Made once; a run with them in place changes nothing.
make_certificates() {
    [[ -s $TLS_DIR/ca.pem && -s $TLS_DIR/server.pem && -s $TLS_DIR/client.pem && -s $TLS_DIR/expired.pem ]] &&
        return 0
    command -v openssl >/dev/null || apt_install openssl
    say "tls: making a test CA and certificates in $TLS_DIR"
    local d
    d=$(mktemp -d)
    (
        cd "$d"
        quiet openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=hopper test CA" \
            -keyout ca.key -out ca.pem -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign"
        printf 'basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
        printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' >client.ext
        local name
        for name in server client expired; do
            quiet openssl req -newkey rsa:2048 -nodes -subj "/CN=hopper-test-$name" \
                -keyout "$name.key" -out "$name.csr"
        done
        quiet openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
            -extfile server.ext -out server.pem
        quiet openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
            -extfile client.ext -out client.pem
        # `openssl x509 -req` cannot date a certificate in the past; `openssl ca` can.
        mkdir -p ca/new
        : >ca/index.txt
        echo 1000 >ca/serial
        printf '%s\n' '[ca]' 'default_ca = test' '[test]' 'dir = ca' 'new_certs_dir = ca/new' \
            'database = ca/index.txt' 'serial = ca/serial' 'default_md = sha256' 'policy = anything' \
            '[anything]' 'commonName = supplied' >ca.cnf
        quiet openssl ca -batch -notext -config ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr \
            -startdate 20200101000000Z -enddate 20200102000000Z -extfile server.ext -out expired.pem
    ) || {
        rm -rf "$d"
        die "tls: openssl failed"
    }
    mkdir -p "$TLS_DIR"
    install -m 644 "$d"/{ca,server,client,expired}.pem "$TLS_DIR/"
    # Test-only keys: the nodes (user rabbitmq in the tree) read the servers', the tests the client's.
    install -m 640 "$d"/{server,client,expired}.key "$TLS_DIR/"
    in_tree "$R40_ROOT" chgrp rabbitmq "$TLS_DIR_IN_TREE/server.key" "$TLS_DIR_IN_TREE/expired.key"
    rm -rf "$d"
}

tls_https_ok() { # port: the node's management API answers over HTTPS (test CA, client certificate)
    [[ $(curl -s -o /dev/null -w '%{http_code}' -u guest:guest --max-time 5 --cacert "$TLS_DIR/ca.pem" \
        --cert "$TLS_DIR/client.pem" --key "$TLS_DIR/client.key" -k \
        "https://localhost:$1/api/overview" 2>/dev/null) == 200 ]]
}

start_tls_node() { # label node amqps https dist fail_if_no_peer_cert certificate
    local label=$1 node=$2 amqps=$3 https=$4 dist=$5 fail=$6 cert=$7
    if tls_https_ok "$https" && tcp_open "$amqps"; then
        say "tls $label: up node=$node amqps=127.0.0.1:$amqps https=127.0.0.1:$https"
        return 0
    fi
    STARTED+=("$label")
    local dir="$TLS_DIR_IN_TREE/$label" c="$TLS_DIR_IN_TREE"
    mkdir -p "$R40_ROOT$dir"
    # Only HTTPS for the management plugin: without management.tcp.* it opens no plain port.
    write_if_changed "$R40_ROOT$dir/rabbitmq.conf" "# written by hopper .ci/brokers.sh
listeners.tcp = none
listeners.ssl.default = 127.0.0.1:$amqps
ssl_options.cacertfile = $c/ca.pem
ssl_options.certfile = $c/$cert.pem
ssl_options.keyfile = $c/$cert.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = $fail
management.ssl.ip = 127.0.0.1
management.ssl.port = $https
management.ssl.cacertfile = $c/ca.pem
management.ssl.certfile = $c/$cert.pem
management.ssl.keyfile = $c/$cert.key
management.ssl.verify = verify_peer
management.ssl.fail_if_no_peer_cert = $fail
loopback_users = none"
    write_if_changed "$R40_ROOT$dir/rabbitmq-env.conf" "# written by hopper .ci/brokers.sh
NODENAME=$node
NODE_IP_ADDRESS=127.0.0.1
DIST_PORT=$dist
CONFIG_FILE=$dir/rabbitmq.conf
MNESIA_BASE=/var/lib/rabbitmq/hopper-tls-$label
LOG_BASE=/var/log/rabbitmq/hopper-tls-$label
PID_FILE=/var/lib/rabbitmq/hopper-tls-$label/$label.pid
ENABLED_PLUGINS_FILE=/etc/rabbitmq/enabled_plugins
ERL_EPMD_ADDRESS=127.0.0.1
SERVER_ADDITIONAL_ERL_ARGS=\"-kernel inet_dist_use_interface {127,0,0,1}\""
    local node_env="RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf"
    mkdir -p "$R40_ROOT/var/lib/rabbitmq/hopper-tls-$label" "$R40_ROOT/var/log/rabbitmq/hopper-tls-$label"
    in_tree "$R40_ROOT" chown -R rabbitmq:rabbitmq "/var/lib/rabbitmq/hopper-tls-$label" \
        "/var/log/rabbitmq/hopper-tls-$label"

    # A node that runs but does not answer as configured (certificates made again): restart it.
    if quiet in_tree "$R40_ROOT" env "$node_env" rabbitmq-diagnostics -q -n "$node" ping; then
        say "tls $label: restarting $node (it does not answer over TLS as configured)"
        quiet in_tree "$R40_ROOT" env "$node_env" rabbitmqctl -q -n "$node" stop || true
    fi
    local p
    for p in "$amqps" "$https" "$dist"; do
        port_busy "$p" && die "tls $label: port $p is taken by something else ($(ss -Hltnp "sport = :$p" | head -n1))"
    done
    say "tls $label: starting $node"
    quiet in_tree "$R40_ROOT" env "$node_env" rabbitmq-server -detached ||
        die "tls $label: rabbitmq-server -detached failed (logs: $R40_ROOT/var/log/rabbitmq/hopper-tls-$label/)"
}

wait_tls_node() { # label node amqps https ...
    local label=$1 node=$2 amqps=$3 https=$4 i
    for ((i = 0; i < WAIT_SECS; i++)); do
        tls_https_ok "$https" && tcp_open "$amqps" && break
        sleep 1
    done
    tls_https_ok "$https" && tcp_open "$amqps" ||
        die "tls $label: https://localhost:$https/api/overview or AMQPS 127.0.0.1:$amqps not up after ${WAIT_SECS}s (logs: $R40_ROOT/var/log/rabbitmq/hopper-tls-$label/)"
    say "tls $label: up node=$node amqps=127.0.0.1:$amqps https=127.0.0.1:$https"
}

ensure_tls_nodes() {
    make_certificates
    mountpoint -q "$R40_ROOT/proc" || mount -t proc proc "$R40_ROOT/proc" || die "cannot mount /proc in $R40_ROOT"
    local spec
    STARTED=()
    # Started together, then waited for: each takes a few seconds to boot.
    for spec in "${TLS_NODES[@]}"; do
        # shellcheck disable=SC2086
        start_tls_node $spec
    done
    for spec in "${TLS_NODES[@]}"; do
        [[ " ${STARTED[*]} " == *" ${spec%% *} "* ]] || continue
        # shellcheck disable=SC2086
        wait_tls_node $spec
    done
}

command -v curl >/dev/null || apt_install curl ca-certificates

ensure_system_broker
if [[ ${HOPPER_SKIP_RABBITMQ4:-0} == 1 ]]; then
    say "rabbitmq40, rabbitmq43: skipped (HOPPER_SKIP_RABBITMQ4=1)"
else
    ensure_tree_broker "${R40[@]}"
    if [[ ${HOPPER_SKIP_RABBITMQ43:-0} == 1 ]]; then
        say "rabbitmq43: skipped (HOPPER_SKIP_RABBITMQ43=1)"
    else
        ensure_tree_broker "${R43[@]}"
    fi
    if [[ ${HOPPER_SKIP_TLS:-0} == 1 ]]; then
        say "tls nodes: skipped (HOPPER_SKIP_TLS=1)"
    else
        ensure_tls_nodes
    fi
fi
