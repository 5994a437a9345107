# shellcheck shell=bash
# Common paths and helpers of the enginekit test bench. Sourced by up, down and the other scripts.

# Runtime state: pids, logs, configs, the env file the harness reads.
EK_BENCH_RUN=${EK_BENCH_RUN:-/run/enginekit-bench}
# Data that is worth keeping between runs of `up`: registry storage, apt repository, test GPG key.
EK_BENCH_DATA=${EK_BENCH_DATA:-/var/tmp/enginekit-bench}
EK_BENCH_ENV=$EK_BENCH_RUN/env
# Daemons must never inherit the lock fd (9): start_daemon and the bus start close it.
EK_BENCH_LOCK=${EK_BENCH_LOCK:-/run/lock/enginekit-bench-up.lock}
EK_BENCH_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

EK_REGISTRY_ADDR=127.0.0.1:5000
# The apt repository is served over HTTPS here, as a vendor's is: test recipes must use https://
# sources, never file:// (the helper refuses those). Loopback only; the certificate is issued by
# the bench's own CA, which `up` adds to the system trust store.
EK_APTREPO_ADDR=127.0.0.1:5443
EK_APTREPO_URL=https://$EK_APTREPO_ADDR
EK_BENCH_TLS=$EK_BENCH_DATA/tls
EK_BENCH_CA=$EK_BENCH_TLS/enginekit-bench-ca.crt
EK_BENCH_CA_TRUSTED=/usr/local/share/ca-certificates/enginekit-bench-ca.crt
EK_DOCKER_SOCK=/var/run/docker.sock
EK_SYSTEM_BUS_SOCK=/run/dbus/system_bus_socket
EK_TEST_USER=ekuser
EK_OTHER_USER=ekother
EK_BENCH_POLICY=/usr/share/polkit-1/actions/org.enginekit.bench.policy

# The bench's own processes get a sane PATH, whatever the caller had (pyenv shims etc.).
EK_SYSTEM_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: ERROR: %s\n' "$*" >&2; exit 1; }

pid_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

# wait_for SECONDS DESCRIPTION CMD... : poll CMD every 0.2 s until it succeeds.
wait_for() {
    local secs=$1 what=$2
    shift 2
    local deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            return 1
        fi
        sleep 0.2
    done
    log "$what is up"
}

bus_answers() {
    DBUS_SYSTEM_BUS_ADDRESS=unix:path=$EK_SYSTEM_BUS_SOCK timeout 5 \
        dbus-send --system --print-reply --dest=org.freedesktop.DBus / org.freedesktop.DBus.GetId >/dev/null 2>&1
}

polkit_answers() {
    # NameHasOwner alone would be true while polkitd is still loading; ask the authority itself.
    DBUS_SYSTEM_BUS_ADDRESS=unix:path=$EK_SYSTEM_BUS_SOCK timeout 5 \
        dbus-send --system --print-reply --dest=org.freedesktop.PolicyKit1 \
        /org/freedesktop/PolicyKit1/Authority org.freedesktop.DBus.Properties.Get \
        string:org.freedesktop.PolicyKit1.Authority string:BackendName >/dev/null 2>&1
}

docker_answers() {
    [[ $(timeout 5 curl -fsS --unix-socket "$EK_DOCKER_SOCK" http://localhost/_ping 2>/dev/null) == OK ]]
}

registry_answers() {
    timeout 5 curl -fsS "http://$EK_REGISTRY_ADDR/v2/" >/dev/null
}

# The repository's signed index, fetched over HTTPS with the system trust store (as apt does), and
# the very bytes on disk: a server on the port that serves something else is not ours.
aptrepo_https_answers() {
    local arch
    arch=$(dpkg --print-architecture)
    timeout 5 curl -fsS "$EK_APTREPO_URL/stable/deb/$arch/InRelease" 2>/dev/null |
        cmp -s - "$EK_BENCH_DATA/aptrepo/www/stable/deb/$arch/InRelease"
}

# The pid of the process listening on a unix socket path or TCP port, if ss can tell.
socket_owner_pid() {
    ss -Hlpn "$@" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n1
}

# Start a detached daemon: start_daemon NAME LOGFILE CMD... ; writes $EK_BENCH_RUN/NAME.pid and
# prints the pid. setsid detaches it from the caller's session (it outlives the test process and
# gets no terminal signals); the inner shell records its own pid and then execs, so the pid is the
# daemon's.
start_daemon() {
    local name=$1 logfile=$2
    shift 2
    local pidfile=$EK_BENCH_RUN/$name.pid
    rm -f "$pidfile"
    : >"$logfile"
    env -i PATH="$EK_SYSTEM_PATH" LANG=C.UTF-8 HOME=/root \
        setsid --fork bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" \
        </dev/null >>"$logfile" 2>&1 9>&-
    local i
    for i in $(seq 1 50); do
        [[ -s $pidfile ]] && break
        sleep 0.1
    done
    [[ -s $pidfile ]] || die "$name did not start; see $logfile"
    cat "$pidfile"
}
