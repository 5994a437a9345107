# enginekit %post: make the new unit files and bus policy take effect without a reboot (Fedora's
# systemd and dbus file triggers do the same; other rpm distributions may lack them). Nothing is
# started or restarted: the helper starts only when the bus activates it, Docker is never
# touched, and no user's state is read or written.
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null 2>&1 || :
fi
# dbus-broker (Fedora's bus) does not watch its configuration: ask it to reload.
if [ -S /run/dbus/system_bus_socket ]; then
    busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig \
        >/dev/null 2>&1 || :
fi
