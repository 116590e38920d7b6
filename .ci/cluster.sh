#!/usr/bin/env bash
# .ci/cluster.sh - a three-node RabbitMQ cluster for hopper's cluster tests, from the system's
# RabbitMQ (3.10, Debian bookworm), beside and apart from the single-node brokers of brokers.sh.
#
#   node   node name            AMQP             management HTTP   dist port
#   1      hopper-c1@localhost  127.0.0.1:5681   127.0.0.1:15681   25681
#   2      hopper-c2@localhost  127.0.0.1:5682   127.0.0.1:15682   25682
#   3      hopper-c3@localhost  127.0.0.1:5683   127.0.0.1:15683   25683
#
# cluster_name `hopper-cluster`; guest/guest from anywhere (loopback_users = none); management on.
# Each node has its own configuration, data and logs under $HOPPER_CLUSTER_DIR (default
# /var/lib/hopper-ci/cluster/N). They run as the rabbitmq user with its home, so they use the
# system broker's Erlang cookie as rabbitmqctl does; the system broker (rabbit@localhost,
# 5672/15672, /etc/rabbitmq) is never touched: every node reads its own env file
# (RABBITMQ_CONF_ENV_FILE), never /etc/rabbitmq/rabbitmq-env.conf.
#
#   .ci/cluster.sh up            start what is not running and join nodes 2 and 3 to node 1;
#                                idempotent (a healthy cluster costs a few HTTP probes)
#   .ci/cluster.sh down          stop the three nodes and remove their data
#   .ci/cluster.sh ctl N ARGS    rabbitmqctl -n <node N> ARGS, as the nodes' user (tests use it)
#   .ci/cluster.sh kill N        SIGKILL node N's Erlang VM (tests use it)
#   .ci/cluster.sh start N       start node N again after `kill` or `ctl N stop_app`, and wait
#                                until it runs the app
#
# Needs root. Prints short progress lines on stderr only.
set -euo pipefail

DIR=${HOPPER_CLUSTER_DIR:-/var/lib/hopper-ci/cluster}
DIR=${DIR%/}
LOG=${HOPPER_CLUSTER_LOG:-/var/lib/hopper-ci/cluster.log}
WAIT_SECS=${HOPPER_BROKER_WAIT_SECS:-90}
CLUSTER_NAME=hopper-cluster
BIN=/usr/lib/rabbitmq/bin

export LC_ALL=C

say() { printf 'cluster: %s\n' "$*" >&2; }
die() {
    say "ERROR: $*"
    [[ -s $LOG ]] && tail -n 25 "$LOG" | sed 's/^/  | /' >&2
    # The node's own log says why it did not boot (waiting for peers, a port, the cookie).
    local f
    for f in "$DIR"/[123]/log/hopper-c?@localhost.log; do
        [[ -s $f ]] || continue
        say "last lines of $f:"
        tail -n 8 "$f" | cut -c1-300 | sed 's/^/  | /' >&2
    done
    exit 1
}
quiet() { "$@" </dev/null >>"$LOG" 2>&1 9>&- 8>&-; }

node() { printf 'hopper-c%s@localhost' "$1"; }
amqp_port() { printf '%s' $((5680 + $1)); }
http_port() { printf '%s' $((15680 + $1)); }
dist_port() { printf '%s' $((25680 + $1)); }

[[ $(id -u) -eq 0 ]] || die "must run as root"
[[ -x $BIN/rabbitmq-server ]] || die "no $BIN/rabbitmq-server: run .ci/brokers.sh first (it installs rabbitmq-server)"
mkdir -p "$(dirname "$LOG")"

# A command of the RabbitMQ distribution, as the rabbitmq user with its home (its Erlang cookie),
# with node N's environment file and nothing of the caller's environment.
as_node() { # N command args...
    local n=$1
    shift
    local cmd=$1
    shift
    # setpriv rather than runuser: PAM would reset the open files limit raised for the node.
    setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/rabbitmq LANG=C.UTF-8 \
        LC_ALL=C.UTF-8 RABBITMQ_CONF_ENV_FILE="$DIR/$n/rabbitmq-env.conf" "$BIN/$cmd" "$@"
}
ctl() { as_node "$1" rabbitmqctl -q -n "$(node "$1")" "${@:2}"; }

http_ok() { # N: node N's management API answers
    [[ $(curl -s -o /dev/null -w '%{http_code}' -u guest:guest --max-time 5 \
        "http://127.0.0.1:$(http_port "$1")/api/overview" 2>/dev/null) == 200 ]]
}
tcp_open() { timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
port_busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

# How many nodes node 1's management API reports running, by name.
running_nodes() {
    curl -s -u guest:guest --max-time 5 "http://127.0.0.1:$(http_port 1)/api/nodes?columns=name,running" 2>/dev/null |
        grep -o '"name":"hopper-c[123]@localhost","running":true' | wc -l || true
}

healthy() {
    local n
    for n in 1 2 3; do
        http_ok "$n" && tcp_open "$(amqp_port "$n")" || return 1
    done
    [[ $(running_nodes) -eq 3 ]]
}

configure() { # N
    local n=$1 d="$DIR/$1"
    mkdir -p "$d/mnesia" "$d/log"
    cat >"$d/rabbitmq.conf" <<EOF
# written by hopper .ci/cluster.sh
cluster_name = $CLUSTER_NAME
listeners.tcp.default = 127.0.0.1:$(amqp_port "$n")
management.tcp.ip = 127.0.0.1
management.tcp.port = $(http_port "$n")
loopback_users = none
EOF
    cat >"$d/rabbitmq-env.conf" <<EOF
# written by hopper .ci/cluster.sh
NODENAME=$(node "$n")
NODE_IP_ADDRESS=127.0.0.1
NODE_PORT=$(amqp_port "$n")
DIST_PORT=$(dist_port "$n")
CONFIG_FILE=$d/rabbitmq.conf
MNESIA_BASE=$d/mnesia
LOG_BASE=$d/log
PID_FILE=$d/node.pid
ENABLED_PLUGINS_FILE=$d/enabled_plugins
ERL_EPMD_ADDRESS=127.0.0.1
SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
EOF
    printf '[rabbitmq_management].\n' >"$d/enabled_plugins"
    chown -R rabbitmq:rabbitmq "$d"
}

start_node() { # N: the Erlang VM and the app, whatever state it is in
    local n=$1
    configure "$n"
    if quiet ctl "$n" ping; then
        # The VM runs; `stop_app` leaves it so.
        tcp_open "$(amqp_port "$n")" || { say "starting the app on $(node "$n")"; quiet ctl "$n" start_app || true; }
        return 0
    fi
    local p
    for p in "$(amqp_port "$n")" "$(http_port "$n")" "$(dist_port "$n")"; do
        port_busy "$p" && die "port $p is taken by something else ($(ss -Hltnp "sport = :$p" | head -n1))"
    done
    say "starting $(node "$n")"
    # Every quorum queue member holds file handles; the default soft limit (1024) runs out at a
    # few hundred quorum queues per node, and the node then refuses connections.
    ulimit -n "$(ulimit -Hn)"
    quiet as_node "$n" rabbitmq-server -detached || die "rabbitmq-server -detached failed for $(node "$n") (logs: $DIR/$n/log)"
}

wait_node() { # N
    local n=$1 i
    # `rabbitmq-server -detached` returns before the VM is there to ask.
    for ((i = 0; i < WAIT_SECS; i++)); do
        quiet ctl "$n" ping && break
        sleep 1
    done
    quiet ctl "$n" await_startup --timeout "$WAIT_SECS" || die "$(node "$n") did not boot (logs: $DIR/$n/log)"
    for ((i = 0; i < WAIT_SECS; i++)); do
        http_ok "$n" && tcp_open "$(amqp_port "$n")" && return 0
        sleep 1
    done
    die "$(node "$n"): management or AMQP not up after ${WAIT_SECS}s (logs: $DIR/$n/log)"
}

join() { # N: join node N to node 1, unless it is in the cluster already
    local n=$1
    if ctl 1 cluster_status --formatter json 2>/dev/null | grep -q "\"$(node "$n")\""; then
        return 0
    fi
    say "joining $(node "$n") to $(node 1)"
    quiet ctl "$n" stop_app || die "stop_app on $(node "$n") failed"
    quiet ctl "$n" reset || die "reset of $(node "$n") failed"
    quiet ctl "$n" join_cluster "$(node 1)" || die "join_cluster $(node 1) from $(node "$n") failed"
    quiet ctl "$n" start_app || die "start_app on $(node "$n") failed"
}

# Node N's Erlang VMs, by the environment file they were started with: the pid file names only
# the last one started, and the node name is not on the command line (rabbit sets it at boot).
vm_pids() { # N
    local pid
    for pid in $(pgrep -x beam.smp 2>/dev/null); do
        tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RABBITMQ_CONF_ENV_FILE=$DIR/$1/rabbitmq-env.conf" &&
            printf '%s\n' "$pid"
    done
    return 0
}

# Every VM of the three nodes killed and their data removed. The cluster holds only what tests
# made, so a cluster that will not come up from what a killed run left (a node waiting for peers
# that forgot it, a half-joined node) is built again from nothing.
wipe() {
    local n pid pids=()
    for n in 1 2 3; do
        for pid in $(vm_pids "$n"); do pids+=("$pid"); done
    done
    if ((${#pids[@]})); then
        kill -9 "${pids[@]}" 2>/dev/null || true
        for pid in "${pids[@]}"; do
            while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
        done
    fi
    rm -rf --one-file-system "$DIR"
}

# The cluster's name, as node 1 reports it; a cluster test that clears it to see a cluster as
# RabbitMQ leaves it by default puts it back, and so does `up` if that test was killed first.
named() {
    [[ $(curl -s -u guest:guest --max-time 5 "http://127.0.0.1:$(http_port 1)/api/overview?columns=cluster_name" 2>/dev/null) == "{\"cluster_name\":\"$CLUSTER_NAME\"}" ]]
}

up() {
    if healthy; then
        named || { say "naming the cluster $CLUSTER_NAME again"; quiet ctl 1 set_cluster_name "$CLUSTER_NAME"; }
        say "up: $(node 1), $(node 2), $(node 3) (AMQP 5681-5683, management 15681-15683)"
        return 0
    fi
    local n
    for n in 1 2 3; do start_node "$n"; done
    for n in 1 2 3; do wait_node "$n"; done
    join 2
    join 3
    for n in 2 3; do wait_node "$n"; done
    local i
    for ((i = 0; i < WAIT_SECS; i++)); do
        healthy && break
        sleep 1
    done
    healthy || die "the cluster did not come up with three running nodes after ${WAIT_SECS}s"
    named || { say "naming the cluster $CLUSTER_NAME again"; quiet ctl 1 set_cluster_name "$CLUSTER_NAME"; }
    say "up: $(node 1), $(node 2), $(node 3) (AMQP 5681-5683, management 15681-15683)"
}

down() {
    local n
    for n in 1 2 3; do
        [[ -f $DIR/$n/rabbitmq-env.conf ]] || continue
        if quiet ctl "$n" ping; then
            say "stopping $(node "$n")"
            quiet ctl "$n" stop || true
        fi
    done
    # A VM that did not answer (killed half-way, or never booted) goes too.
    wipe
    say "down"
}

case ${1:-up} in
up)
    # One `up` or `down` at a time.
    exec 9>"$(dirname "$DIR")/.cluster.lock"
    flock -w 600 9 || die "another cluster.sh holds the lock"
    : >"$LOG"
    # die() ends the subshell only: a first attempt that fails is followed by one from nothing.
    if ! (up); then
        say "the cluster did not come up from the data it had; starting it again from empty data"
        wipe
        : >"$LOG"
        up
    fi
    ;;
down)
    exec 9>"$(dirname "$DIR")/.cluster.lock"
    flock -w 600 9 || die "another cluster.sh holds the lock"
    down
    ;;
ctl)
    [[ $# -ge 3 ]] || die "usage: cluster.sh ctl N ARGS..."
    ctl "${@:2}"
    ;;
kill)
    [[ $# -eq 2 ]] || die "usage: cluster.sh kill N"
    pid=$(cat "$DIR/$2/node.pid" 2>/dev/null) || die "no pid file for $(node "$2")"
    kill -9 "$pid"
    # Until the VM is gone, a start would find it running.
    while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    ;;
start)
    [[ $# -eq 2 ]] || die "usage: cluster.sh start N"
    start_node "$2"
    wait_node "$2"
    ;;
*)
    die "unknown command ${1}: up, down, ctl N ARGS, kill N, start N"
    ;;
esac
