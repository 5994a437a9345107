# enginekit %postun: make systemd and the bus forget the removed files. rpm has no purge: the
# helper's state, /var/lib/enginekit-helper (nonce ledger and receipts), stays after an erase,
# as other packages' runtime state does; `rm -rf /var/lib/enginekit-helper` removes it.
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null 2>&1 || :
fi
if [ -S /run/dbus/system_bus_socket ]; then
    busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig \
        >/dev/null 2>&1 || :
fi
