#!/usr/bin/python3
"""A desktop client of enginekit's session service, in Python with GLib's GDBus.

It uses python3-gi only (no enginekit code): every value on the bus is a plain D-Bus type or
JSON text, and every error a stable name (docs/dbus-api.md). What a desktop app does:

  1. list the installed engines          Installations()
  2. show the plan and its digest        Plan(engine): on the Docker the machine has, else on
                                         rootless Podman (no group, no new sign-in)
  3. ask the user                        (a dialog in an app; a prompt here, or --yes)
  4. set up under that consent           Setup(engine, plan_digest) -> operation object
  5. follow progress by signals          Operation.Changed, Operation.Progress
  6. handle "sign in again"              phase relogin-required: tell the user, exit 4;
                                         the next run finds the operation and Resumes it
                                         (or follows it, if the service resumed it itself)
  7. load a model and print its URL      Load(engine, folder, options) -> session object,
                                         Session.Changed until ready, then BaseUrl

Run it on a desktop session (the service is D-Bus activated):

  examples/python/enginekit_client.py --engine vllm --model ~/models/Qwen2.5-7B-Instruct

Each line it prints starts with a word a script can match: engines, plan, runtime, changes,
digest, signal, phase, progress, error, relogin, url. Exit status: 0 done, 1 failed, 3 blocked or
declined, 4 sign in again first.
"""

import argparse
import json
import sys

import gi

gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

NAME = "org.enginekit.Broker1"
PATH = "/org/enginekit/Broker1"
IFACE = "org.enginekit.Broker1"
OP_IFACE = "org.enginekit.Broker1.Operation"
SESSION_IFACE = "org.enginekit.Broker1.Session"

# Phases after which an operation waits for someone (or is over).
STOPS = {"ready", "removed", "failed", "cancelled", "awaiting-consent",
         "relogin-required", "reboot-required"}


class BrokerError(Exception):
    """A refusal of the service: its D-Bus error name and the stable code its message starts with."""

    def __init__(self, error):
        self.name = Gio.DBusError.get_remote_error(error) or ""
        # GDBus puts "GDBus.Error:NAME: " before the service's message (strip_remote_error
        # would drop it, but PyGObject hands it a copy of the error): drop it here.
        message = error.message
        prefix = f"GDBus.Error:{self.name}: "
        if self.name and message.startswith(prefix):
            message = message[len(prefix):]
        self.message = message
        self.code = message.split(":", 1)[0]
        super().__init__(f"{self.name} {self.message}")


class Client:
    def __init__(self, bus):
        self.bus = bus
        self.loop = GLib.MainLoop()
        # The stable code of the last operation's error, if it failed.
        self.error_code = ""

    def call(self, method, args=None, reply="()", path=PATH, iface=IFACE, timeout_ms=120_000):
        """A method call; its reply's values, or BrokerError."""
        try:
            result = self.bus.call_sync(
                NAME, path, iface, method, args, GLib.VariantType.new(reply),
                # A setup may need an administrator's password: let polkit ask.
                Gio.DBusCallFlags.ALLOW_INTERACTIVE_AUTHORIZATION, timeout_ms, None)
        except GLib.Error as error:
            raise BrokerError(error) from None
        return result.unpack()

    def prop(self, path, iface, name):
        (value,) = self.call("Get", GLib.Variant("(ss)", (iface, name)), "(v)", path,
                             "org.freedesktop.DBus.Properties")
        return value

    def follow(self, path, iface, done):
        """Runs the main loop, printing the object's signals, until done(member, args) is true."""
        def on_signal(_bus, _sender, _path, _iface, member, params):
            args = params.unpack()
            if member == "Changed":
                print(f"signal Changed {' '.join(str(a) for a in args)}", flush=True)
            elif member == "Progress":
                label, completed, total, unit = args
                print(f"signal Progress {completed}/{total} {unit} {label}", flush=True)
            if done(member, args):
                self.loop.quit()

        sub = self.bus.signal_subscribe(NAME, iface, None, path, None,
                                        Gio.DBusSignalFlags.NONE, on_signal)
        try:
            # The state may have moved on before the subscription: look once.
            if not done(None, None):
                self.loop.run()
        finally:
            self.bus.signal_unsubscribe(sub)

    def operation_phase(self, path):
        return self.prop(path, OP_IFACE, "Phase")


def ask(question, yes):
    if yes:
        return True
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def set_up(client, engine, yes):
    """Plan, consent, Setup (or the Resume of a setup waiting for a new login); the final phase."""
    for path in client.call("Operations", reply="(ao)")[0]:
        if (client.prop(path, OP_IFACE, "Engine") != engine
                or client.prop(path, OP_IFACE, "Kind") != "setup"):
            continue
        phase = client.operation_phase(path)
        if phase == "relogin-required":
            print(f"phase relogin-required {path}: resuming after the new sign-in", flush=True)
            try:
                client.call("Resume", path=path, iface=OP_IFACE)
            except BrokerError as error:
                # The service resumed it on its own first (it does when it starts): follow it.
                if error.code != "MANAGED_OPERATION_CONFLICT":
                    raise
            return follow_operation(client, path)
        if phase not in STOPS:
            # Still running: started earlier by this app or another one, or resumed by the
            # service on its own when it started in a new sign-in. Follow it, do not start another.
            print(f"phase {phase} {path}: already running, following it", flush=True)
            return follow_operation(client, path)
    (text,) = client.call("Plan", GLib.Variant("(s)", (engine,)), "(s)")
    plan = json.loads(text)
    print(f"plan {engine}: {plan['availability']}", flush=True)
    # Docker where the machine has it, else rootless Podman (no group, no new sign-in).
    print(f"runtime {plan.get('runtime', 'docker')}", flush=True)
    for blocker in plan.get("blockers", []):
        print(f"plan blocker {blocker['code']}: {blocker.get('message', '')}", flush=True)
    if plan["availability"] == "supported":
        return "ready"
    if plan["availability"] != "setup-required":
        return "blocked"
    for change in plan.get("system_changes", []):
        print(f"changes {change.get('code', '')}: {change.get('text', '')}", flush=True)
    digest = plan["plan_digest"]
    print(f"digest {digest}", flush=True)
    if plan.get("may_require_relogin"):
        print("plan note: you may have to sign out and in again", flush=True)
    if not ask(f"Set up {engine} as shown?", yes):
        return "declined"
    (path,) = client.call("Setup", GLib.Variant("(ss)", (engine, digest)), "(o)")
    print(f"operation {path}", flush=True)
    return follow_operation(client, path)


def follow_operation(client, path):
    def done(member, args):
        if member == "Progress":
            return False
        phase = args[0] if member == "Changed" else client.operation_phase(path)
        return phase in STOPS

    client.follow(path, OP_IFACE, done)
    phase = client.operation_phase(path)
    print(f"phase {phase}", flush=True)
    error = client.prop(path, OP_IFACE, "Error")
    if error:
        error = json.loads(error)
        client.error_code = error["code"]
        print(f"error {error['code']}: {error['message']}", flush=True)
    return phase


def load(client, engine, model, name, timeout):
    options = {"timeout": GLib.Variant("u", timeout)}
    if name:
        options["name"] = GLib.Variant("s", name)
    (path,) = client.call("Load", GLib.Variant("(ssa{sv})", (engine, model, options)), "(o)")
    print(f"session {path}", flush=True)

    def done(member, args):
        state = args[0] if member == "Changed" else client.prop(path, SESSION_IFACE, "State")
        return state in ("ready", "failed", "stopped")

    client.follow(path, SESSION_IFACE, done)
    if client.prop(path, SESSION_IFACE, "State") != "ready":
        error = json.loads(client.prop(path, SESSION_IFACE, "Error") or "{}")
        print(f"error {error.get('code')}: {error.get('message')}", flush=True)
        return 1
    print(f"url {client.prop(path, SESSION_IFACE, 'BaseUrl')}", flush=True)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default="vllm")
    parser.add_argument("--yes", action="store_true", help="consent without asking")
    parser.add_argument("--model", help="a model folder to load once the engine is set up")
    parser.add_argument("--name", help="the session (and served model) name")
    parser.add_argument("--timeout", type=int, default=600, help="load timeout, seconds")
    args = parser.parse_args()

    client = Client(Gio.bus_get_sync(Gio.BusType.SESSION, None))
    try:
        (text,) = client.call("Installations", reply="(s)")
        installed = [record["engine"] for record in json.loads(text)]
        print(f"engines installed: {' '.join(installed) or '(none)'}", flush=True)
        phase = set_up(client, args.engine, args.yes)
        if phase == "relogin-required":
            print("relogin: sign out and sign in again (the docker group takes effect in a new "
                  "login session), then run this again", flush=True)
            return 4
        if phase in ("blocked", "declined"):
            return 3
        if phase != "ready":
            # A dismissed polkit dialog (or a wrong password) is the user's no.
            return 3 if client.error_code == "MANAGED_ELEVATION_DECLINED" else 1
        if args.model:
            return load(client, args.engine, args.model, args.name, args.timeout)
        return 0
    except BrokerError as error:
        print(f"error {error.name} {error.message}", flush=True)
        return 3 if error.code == "MANAGED_ELEVATION_DECLINED" else 1


if __name__ == "__main__":
    sys.exit(main())
