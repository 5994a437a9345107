# enginekit %preun: on erase ($1 = 0; never on upgrade), stop the helper if the bus had activated
# it, before its binary goes. On upgrade a running helper finishes with the old binary, exits
# when idle, and the next call activates the new one.
if [ "$1" -eq 0 ] && [ -d /run/systemd/system ]; then
    systemctl stop enginekit-helper.service >/dev/null 2>&1 || :
fi
