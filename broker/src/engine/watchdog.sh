#!/bin/sh
# enginekit watchdog: PID 1 of an engine container. It starts the engine
# given after `--`, forwards TERM/INT to it as TERM, and stops it when the broker's heartbeat goes
# stale, so a broker that dies (kill -9, crash, lost session) never leaves the GPU held.
#
# Staleness is an observation (the heartbeat file's first line, which the broker rewrites on
# every tick) unchanged for (LIMIT + POLL) / POLL consecutive polls: never clock arithmetic, so
# clock steps, a leftover old file or a missing file cannot fool it. Needs only a POSIX sh and
# `sleep` (tested with dash and busybox sh).
#
# Exit: the engine's own status when it exits by itself or after a TERM; 96 when the settings
# are malformed (nothing is started); 97 when the heartbeat went stale.
#
# Settings (environment; positive integers without a leading zero):
#   ENGINEKIT_WATCHDOG_HEARTBEAT_FILE      absolute path of the heartbeat file
#   ENGINEKIT_WATCHDOG_STALE_LIMIT_SECS    how long an unchanged heartbeat is tolerated
#   ENGINEKIT_WATCHDOG_POLL_INTERVAL_SECS  how often it is looked at
#   ENGINEKIT_WATCHDOG_KILL_GRACE_SECS     TERM → KILL delay when stopping the engine

say() { echo "enginekit-watchdog: $*" >&2; }
malformed() { say "$*; the engine was not started"; exit 96; }

positive() { # positive NAME VALUE
    case $2 in
        '' | 0* | *[!0-9]*) malformed "$1 must be a positive integer without a leading zero (got '$2')" ;;
    esac
    [ ${#2} -le 6 ] || malformed "$1 is too large (got '$2')"
}

hb=${ENGINEKIT_WATCHDOG_HEARTBEAT_FILE-}
limit=${ENGINEKIT_WATCHDOG_STALE_LIMIT_SECS-}
poll=${ENGINEKIT_WATCHDOG_POLL_INTERVAL_SECS-}
grace=${ENGINEKIT_WATCHDOG_KILL_GRACE_SECS-}
case $hb in
    /*) ;;
    *) malformed "ENGINEKIT_WATCHDOG_HEARTBEAT_FILE must be an absolute path (got '$hb')" ;;
esac
positive ENGINEKIT_WATCHDOG_STALE_LIMIT_SECS "$limit"
positive ENGINEKIT_WATCHDOG_POLL_INTERVAL_SECS "$poll"
positive ENGINEKIT_WATCHDOG_KILL_GRACE_SECS "$grace"
[ "${1-}" = "--" ] || malformed "the engine command must follow '--'"
shift
[ $# -gt 0 ] || malformed "no engine command after '--'"
threshold=$(((limit + poll) / poll))

# Created only when absent, in a subshell: a failed redirection must not end this shell. The
# folder is normally mounted read-only and the broker wrote the first beat before the start.
(if [ ! -e "$hb" ]; then : >"$hb"; fi) 2>/dev/null

# Sets `seen` to the heartbeat's first line, or `missing`. No command substitution (no fork):
# `read` is a regular builtin, so a failed redirection only fails the command.
observe() {
    seen=missing
    if IFS= read -r line 2>/dev/null <"$hb"; then
        seen="beat:$line"
    fi
}

# Sleeps N seconds in one-second slices. dash (Debian 12's 0.5.12, the /bin/sh of Ubuntu-based
# engine images) does not always cut a `wait` short for a trapped signal, so a trap runs at the
# latest when the current slice ends: a TERM is acted on within a second. A slice cut short by
# a signal is waited out, so repeated TERMs never shorten or restart the grace.
nap() {
    _left=$1
    while [ "$_left" -gt 0 ]; do
        sleep 1 &
        _nap=$!
        while ! wait "$_nap"; do
            kill -0 "$_nap" 2>/dev/null || break
        done
        _left=$((_left - 1))
    done
}

engine=
stopping=
stop_engine() { # stop_engine REASON
    [ -z "$stopping" ] || return 0
    stopping=1
    pid=${engine:-$!}
    say "$1: sending TERM to the engine (pid $pid), KILL after ${grace} s"
    kill -TERM "$pid" 2>/dev/null
    waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$grace" ]; do
        nap 1
        waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "the engine ignored TERM for ${grace} s: sending KILL"
        kill -KILL "$pid" 2>/dev/null
    fi
}

on_signal() {
    if [ -z "$stopping" ]; then
        stop_engine "asked to stop"
        wait "$engine"
        exit $?
    fi
}
trap on_signal TERM INT

"$@" &
engine=$!

observe
last=$seen
same=0
while :; do
    nap "$poll"
    if ! kill -0 "$engine" 2>/dev/null; then
        wait "$engine"
        exit $?
    fi
    observe
    if [ "$seen" = "$last" ]; then
        same=$((same + 1))
    else
        same=0
        last=$seen
    fi
    if [ "$same" -ge "$threshold" ]; then
        stop_engine "the heartbeat has not changed for $same polls of ${poll} s (limit ${limit} s)"
        wait "$engine"
        exit 97
    fi
done
