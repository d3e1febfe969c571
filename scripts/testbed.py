#!/usr/bin/env python3
"""Builds the system-test topology by hand, for poking at slipstream interactively:

    scripts/testbed.py up [--hosts a,b] [--queues N] [--router] [--prefix slipbed] [--hold]
    scripts/testbed.py status [--prefix slipbed]
    scripts/testbed.py down [--prefix slipbed]

Namespaces are named <prefix>-<host> (slipbed-a, slipbed-b), so they are stable between runs.
"""

import argparse
import os
import pathlib
import signal
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "system"))

import testbed as tbmod  # noqa: E402
from testbed import Testbed, Topology  # noqa: E402


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop(signal.Signals(signum).name)


def cmd_up(args):
    hosts = [h for h in args.hosts.split(",") if h]
    topo = Topology(hosts=hosts, queues=args.queues, router=args.router)
    tb = Testbed(topo, prefix=args.prefix, tag="", persistent=not args.hold)
    # Ctrl-C or SIGTERM while building (or while holding) removes what was made.
    signal.signal(signal.SIGINT, _raise_stop)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGHUP, _raise_stop)
    try:
        tb.up()
        print(f"testbed up ({topo.queues} queue(s) per veth, router={'yes' if topo.router else 'no'}):")
        for line in tb.describe():
            print("  " + line)
        if args.hold:
            print("holding; Ctrl-C or SIGTERM takes it down", flush=True)
            while True:
                signal.pause()
        else:
            print(f"take it down with: {sys.argv[0]} down --prefix {args.prefix}  (or make testbed-down)")
            tb.detach()
            return 0
    except _Stop as e:
        print(f"\n{e}: taking the testbed down", file=sys.stderr, flush=True)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        tb.down()
        return 0 if args.hold else 130
    except BaseException:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        tb.down()
        raise


def _ours(prefix):
    return tbmod.list_namespaces(prefix + "-")


def cmd_down(args):
    names = _ours(args.prefix)
    if not names:
        print(f"no namespaces named {args.prefix}-*")
        return 0
    deleted = tbmod.remove_namespaces(names)
    for n in names:
        print(f"{'removed' if n in deleted else 'FAILED to remove'} {n}")
    return 0 if len(deleted) == len(names) else 1


def cmd_status(args):
    names = _ours(args.prefix)
    if not names:
        print(f"no namespaces named {args.prefix}-*")
        return 1
    for ns in names:
        print(f"{ns}: enter with: ip netns exec {ns} bash")
        r = tbmod._ip("-n", ns, "-br", "addr", "show", check=False)
        for line in r.stdout.splitlines():
            if not line.startswith("lo "):
                print("    " + line)
        pids = tbmod._ns_pids(ns)
        if pids:
            print(f"    processes: {' '.join(map(str, pids))}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build the topology")
    up.add_argument("--hosts", default="a,b", help="comma-separated host names (default a,b)")
    up.add_argument("--queues", type=int, default=1, help="queues per veth (default 1)")
    up.add_argument("--router", action="store_true", help="put a router namespace r between the hosts")
    up.add_argument("--prefix", default="slipbed", help="namespace prefix (default slipbed)")
    up.add_argument("--hold", action="store_true",
                    help="stay in the foreground and take the testbed down on a signal")
    for name in ("down", "status"):
        p = sub.add_parser(name, help=f"{name} the namespaces named PREFIX-*")
        p.add_argument("--prefix", default="slipbed")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("testbed.py: needs root (network namespaces)", file=sys.stderr)
        return 1
    if "-" in args.prefix or not args.prefix:
        ap.error("--prefix must be non-empty and contain no '-'")
    try:
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status}[args.cmd](args)
    except (ValueError, tbmod.CommandError) as e:
        print(f"testbed.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
