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

# need PACKAGE...: installs the Debian packages among PACKAGE that are not installed yet. The one
# way a bench script gets a tool it runs: none stops on a program that Debian's archive has.
# Waits for another apt run's lock instead of fighting it; the log is $EK_BENCH_RUN/apt.log.
# tests/bench/check-programs reads the package names given here (literal words only, so that it can).
need() {
    local p missing=()
    for p in "$@"; do
        [[ $(dpkg-query -W -f '${db:Status-Abbrev}' "$p" 2>/dev/null || true) == "ii " ]] || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    [[ $(id -u) == 0 ]] || die "installing ${missing[*]} needs root"
    mkdir -p "$EK_BENCH_RUN"
    log "installing from Debian: ${missing[*]}"
    local apt_opts=(-o DPkg::Lock::Timeout=900 -o Acquire::Retries=3)
    # An index from before this boot may lack a package or name a version the mirror dropped.
    DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" update -q >>"$EK_BENCH_RUN/apt.log" 2>&1 9>&- 8>&- ||
        die "apt-get update failed; see $EK_BENCH_RUN/apt.log"
    # docker.io's postinst tries to start the service; without systemd that fails harmlessly.
    DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -q --no-install-recommends \
        "${missing[@]}" >>"$EK_BENCH_RUN/apt.log" 2>&1 9>&- 8>&- ||
        die "apt-get install ${missing[*]} failed; see $EK_BENCH_RUN/apt.log"
}

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

# Bash code that closes every file descriptor above 2 of the shell running it, before that shell
# execs a daemon: a daemon must hold nothing of its caller's. A lock a caller holds through an
# inherited descriptor (`flock LOCKFILE tests/run`, which leaves the lock on fd 3 for its command)
# would otherwise stay held for as long as the daemon lives, by nobody that will ever let go.
EK_CLOSE_INHERITED_FDS='for fd in /proc/$$/fd/*; do fd=${fd##*/}; ((fd > 2)) && eval "exec $fd>&-"; done'

# Start a detached daemon: start_daemon NAME LOGFILE CMD... ; writes $EK_BENCH_RUN/NAME.pid and
# prints the pid. setsid detaches it from the caller's session (it outlives the test process and
# gets no terminal signals); the inner shell closes what it inherited (above), records its own pid
# and then execs, so the pid is the daemon's.
start_daemon() {
    local name=$1 logfile=$2
    shift 2
    local pidfile=$EK_BENCH_RUN/$name.pid
    rm -f "$pidfile"
    : >"$logfile"
    env -i PATH="$EK_SYSTEM_PATH" LANG=C.UTF-8 HOME=/root \
        setsid --fork bash -c "$EK_CLOSE_INHERITED_FDS"'; echo $$ >"$0"; exec "$@"' "$pidfile" "$@" \
        </dev/null >>"$logfile" 2>&1 9>&-
    local i
    for i in $(seq 1 50); do
        [[ -s $pidfile ]] && break
        sleep 0.1
    done
    [[ -s $pidfile ]] || die "$name did not start; see $logfile"
    cat "$pidfile"
}

# systemd_images_main SUITE PACKAGES [--quiet] [--force] [--print-name | --print-docker-name]:
# builds (once) the bench's two systemd-booted images of Debian SUITE (Debian's archive), as
# described at the top of tests/bench/systemd-image: enginekit-bench/systemd:SUITE-<digest> and
# enginekit-bench/systemd-docker:SUITE-<digest>, which adds PACKAGES (space-separated: the suite's
# Docker, python3 for the stand-in toolkit), Docker off at boot and confined to a private network
# namespace. The tag is a digest of the suite, the packages and the text of this function and its
# helpers, everything that goes into the images, so a change never meets an old image.
systemd_images_main() {
    local suite=$1 packages=$2
    shift 2
    local digest tag image docker_image
    digest=$( {
        echo "$suite $packages"
        declare -f systemd_images_main systemd_images_build systemd_images_import
    } | sha256sum | cut -c1-12)
    tag=$suite-$digest
    image=enginekit-bench/systemd:$tag
    docker_image=enginekit-bench/systemd-docker:$tag

    local quiet=0 force=0 a
    for a in "$@"; do
        case $a in
        --quiet) quiet=1 ;;
        --force) force=1 ;;
        --print-name)
            echo "$image"
            return 0
            ;;
        --print-docker-name)
            echo "$docker_image"
            return 0
            ;;
        *) die "unknown argument $a" ;;
        esac
    done
    [[ $(id -u) == 0 ]] || die "building the systemd image needs root"
    docker_answers || die "dockerd does not answer on $EK_DOCKER_SOCK (run tests/bench/up first)"
    mkdir -p "$EK_BENCH_DATA" "$(dirname "$EK_BENCH_LOCK")"
    exec 8>"$EK_BENCH_LOCK.systemd-$suite"
    flock -w 900 8 || die "could not take $EK_BENCH_LOCK.systemd-$suite"
    if ((force == 0)) && docker image inspect "$image" >/dev/null 2>&1 &&
        docker image inspect "$docker_image" >/dev/null 2>&1; then
        ((quiet)) || echo "$image and $docker_image are present"
        return 0
    fi
    systemd_images_build "$suite" "$packages" "$image" "$docker_image"
    ((quiet)) || echo "built $image and $docker_image"
}

# systemd_images_build SUITE PACKAGES IMAGE DOCKER_IMAGE (called by systemd_images_main, holding
# fd 8).
systemd_images_build() {
    local suite=$1 packages=$2 image=$3 docker_image=$4
    # ca-certificates: the harness adds the bench CA with update-ca-certificates, so that apt inside
    # reaches the bench's HTTPS apt repository as a host reaches a vendor's.
    local include=systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,polkitd,ca-certificates
    local root=$EK_BENCH_DATA/systemd-rootfs-$suite unit
    rm -rf "$root"
    log "debootstrap $suite into $root (about two minutes)"
    debootstrap --variant=minbase --include="$include" "$suite" "$root" http://deb.debian.org/debian \
        >"$EK_BENCH_DATA/systemd-debootstrap-$suite.log" 2>&1 8>&- ||
        die "debootstrap failed; see $EK_BENCH_DATA/systemd-debootstrap-$suite.log"
    # Units that cannot work in a container only make the boot "degraded".
    for unit in systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket \
        getty@tty1.service console-getty.service systemd-remount-fs.service; do
        ln -sf /dev/null "$root/etc/systemd/system/$unit"
    done
    echo "enginekit-bench-systemd" >"$root/etc/hostname"
    systemd_images_import "$root" "$image" "enginekit test bench: systemd-booted Debian $suite"

    # The Docker variant: PACKAGES installed in the same rootfs (no service may start in a chroot).
    log "installing $packages into the rootfs"
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
        sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends "$@" && apt-get clean' sh $packages \
        >"$EK_BENCH_DATA/systemd-docker-apt-$suite.log" 2>&1 8>&- ||
        die "installing $packages into the rootfs failed; see $EK_BENCH_DATA/systemd-docker-apt-$suite.log"
    rm -f "$root/usr/sbin/policy-rc.d"
    # Docker: installed, off at boot, confined to a private network namespace (see the top of
    # tests/bench/systemd-image).
    rm -f "$root"/etc/systemd/system/*.wants/docker.service "$root"/etc/systemd/system/*.wants/docker.socket \
        "$root"/etc/systemd/system/*.wants/containerd.service
    mkdir -p "$root/etc/docker" "$root/etc/systemd/system/docker.service.d" \
        "$root/etc/systemd/system/containerd.service.d"
    printf '{"bridge": "none", "iptables": false, "ip6tables": false}\n' >"$root/etc/docker/daemon.json"
    # PrivateMounts=no: since systemd 254 PrivateNetwork= implies a mount namespace of each unit's
    # own, where dockerd's mounts of a container's rootfs (the containerd snapshotter's) would be
    # invisible to containerd and runc (trixie: 'exec: "sh": executable file not found').
    printf '%s\n' \
        '# enginekit bench: containerd (and runc under it) in a private network namespace.' \
        '[Service]' \
        'PrivateNetwork=yes' \
        'PrivateMounts=no' >"$root/etc/systemd/system/containerd.service.d/enginekit-bench-netns.conf"
    printf '%s\n' \
        '# enginekit bench: dockerd in containerd'\''s private network namespace, never the host'\''s.' \
        '[Unit]' \
        'JoinsNamespaceOf=containerd.service' \
        'Requires=containerd.service' \
        'After=containerd.service' \
        '[Service]' \
        'PrivateNetwork=yes' \
        'PrivateMounts=no' >"$root/etc/systemd/system/docker.service.d/enginekit-bench-netns.conf"
    printf '%s\n' \
        '[Unit]' \
        'Description=enginekit bench: 127.0.0.1:5000 inside Docker'\''s namespace, forwarded to the host registry' \
        'JoinsNamespaceOf=containerd.service' \
        '[Socket]' \
        'ListenStream=127.0.0.1:5000' \
        'PrivateNetwork=yes' >"$root/etc/systemd/system/registry-proxy.socket"
    printf '%s\n' \
        '[Unit]' \
        'Description=enginekit bench: forward to the host registry on 127.0.0.1:5000' \
        'Requires=registry-proxy.socket' \
        'After=registry-proxy.socket' \
        '[Service]' \
        'ExecStart=/lib/systemd/systemd-socket-proxyd 127.0.0.1:5000' >"$root/etc/systemd/system/registry-proxy.service"
    systemd_images_import "$root" "$docker_image" "enginekit test bench: systemd-booted Debian $suite with docker.io"
    rm -rf "$root"
}

# systemd_images_import ROOT IMAGE MESSAGE: the rootfs at ROOT as IMAGE, booting /sbin/init.
systemd_images_import() {
    tar --numeric-owner -C "$1" -c . |
        docker import --change 'CMD ["/sbin/init"]' --change 'ENV container=docker' \
            --message "$3" - "$2" >/dev/null
}
