"""Network-namespace testbed for the system tests and for scripts/testbed.py.

A Topology names hosts and the veth links between them; a Testbed turns it into namespaces and
veth pairs, runs commands inside them, and always takes everything down again (atexit too).

Loss on a router topology (Topology(router=True)), as a lossy wire would drop packets:
    tb.router_loss(percent, only_l4=True, build_dir=None)
        starts build_dir/tests/prog/tc_loss at the tc ingress of every port of the router "r"
        (so each direction loses `percent` % of its packets, independently), as tracked processes;
        only_l4 limits the drops to IPv4 TCP/UDP (ARP and ICMP always pass). Calling it again
        while the loss runs changes the rate in place (counters keep counting). build_dir defaults
        to env SLIP_BUILD, then <repo>/build; FileNotFoundError if tc_loss is not built there.
    tb.router_loss_stats()
        stops the loss and returns its counters: {"a": {...}, "b": {...}, "total": {...}} where
        "a" counts packets that came from host a (the a->b direction) and each dict holds
        passed, dropped, skipped (not a drop candidate), gso (multi-segment candidates, expected 0)
        and rate = dropped / (passed + dropped). After this call the link is loss-free again.
"""

import atexit
import ipaddress
import os
import select
import shlex
import signal
import subprocess
import threading
import time
import weakref

__all__ = ["Topology", "Testbed", "Host", "Iface", "CommandError",
           "list_namespaces", "remove_namespaces", "cleanup_all"]

# Per-namespace bpffs instances live here (in the root mount namespace) and are bind-mounted on
# /sys/fs/bpf by every command, so objects pinned by one command are seen by the next one.
BPFFS_ROOT = "/run/slip-testbed"

# `ip netns exec` (ns_exec) gives each command a fresh /sys without bpffs: mount it before exec'ing.
_NS_WRAPPER = ('mountpoint -q /sys/fs/bpf || '
               '{ [ -d "$SLIP_TB_BPFFS" ] && mountpoint -q "$SLIP_TB_BPFFS" && '
               'mount --bind "$SLIP_TB_BPFFS" /sys/fs/bpf; } 2>/dev/null || '
               'mount -t bpf bpf /sys/fs/bpf; exec "$@"')

KILL_GRACE_S = 3.0

_root_mounted = None


def _root_is_mounted():
    """Whether / is a mount point here (it is on a machine; not in a bare chroot)."""
    global _root_mounted
    if _root_mounted is None:
        with open("/proc/self/mountinfo") as f:
            _root_mounted = any(line.split()[4] == "/" for line in f)
    return _root_mounted


def ns_exec(ns):
    """The argv prefix that runs a command in network namespace ns with that namespace's /sys, as
    `ip netns exec` does. ip netns exec first makes / a slave mount, which fails where / is not a
    mount point (a bare chroot, such as a clean-root test copy made without a bind mount): there
    the same is done with nsenter and unshare, leaving / as it is. The new mount namespace's /sys
    is a copy; mounting the namespace's sysfs over it reaches no other namespace."""
    if _root_is_mounted():
        return ["ip", "netns", "exec", ns]
    return ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--propagation", "unchanged", "--",
            "sh", "-c", 'umount -l /sys 2>/dev/null; mount -t sysfs sysfs /sys && exec "$@"', "sh"]


class CommandError(subprocess.CalledProcessError):
    """CalledProcessError whose message includes the command's output (pytest shows it)."""

    def __str__(self):
        s = super().__str__()
        for label, data in (("stdout", self.stdout), ("stderr", self.stderr)):
            if data:
                if isinstance(data, bytes):
                    data = data.decode(errors="replace")
                s += f"\n--- {label} ---\n{data.rstrip()}"
        return s


def _ip(*args, check=True):
    """Runs `ip ARGS` in the root namespace (`-n NS ...`: in NS); raises CommandError with stderr
    on failure. `ip -n` switches namespaces the way `ip netns exec` does: see ns_exec."""
    argv = ["ip", *args]
    if args[:1] == ("-n",) and not _root_is_mounted():
        argv = [*ns_exec(args[1]), "ip", *args[2:]]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise CommandError(r.returncode, ["ip", *args], r.stdout, r.stderr)
    return r


class Topology:
    """What to build.

    router=False: every link (x, y) gets the subnet 198.18.<k>.0/24 (k = link index, so the default
    a-b link is 198.18.0.0/24), x is .1 and y is .2.
    router=True: a namespace "r" is added; each host i (in list order) is linked to r on
    198.18.<i+1>.0/24 with the host at .1 and r at .254, r forwards and the hosts route via r:
        a(198.18.1.1/24) -- r(198.18.1.254 | 198.18.2.254) -- b(198.18.2.1/24)
    `links` is ignored with router=True.
    MACs are 02:00:00:00:<link index + 1>:<host index + 1> (hex), host index in `hosts` order,
    with r last.  Interfaces of a host are veth0, veth1, ... in link order.
    """

    def __init__(self, hosts=("a", "b"), links=None, queues=1, router=False, ipv6=False):
        self.hosts = list(hosts)
        self.router = bool(router)
        self.queues = int(queues)
        # IPv6 off by default: keeps router solicitations and DAD out of packet captures.
        self.ipv6 = bool(ipv6)
        if self.queues < 1:
            raise ValueError("queues must be >= 1")
        if len(set(self.hosts)) != len(self.hosts) or not self.hosts:
            raise ValueError(f"host names must be unique and non-empty: {self.hosts}")
        for h in self.hosts:
            if not h or "/" in h or " " in h:
                raise ValueError(f"bad host name {h!r}")
        if self.router:
            if "r" in self.hosts:
                raise ValueError("with router=True the name 'r' is reserved for the router")
            if len(self.hosts) > 253:
                raise ValueError("too many hosts")
            self.links = [(h, "r") for h in self.hosts]
        else:
            if links is None:
                if len(self.hosts) != 2:
                    raise ValueError("links must be given unless there are exactly two hosts")
                links = [(self.hosts[0], self.hosts[1])]
            self.links = [tuple(l) for l in links]
            for x, y in self.links:
                if x not in self.hosts or y not in self.hosts or x == y:
                    raise ValueError(f"bad link {(x, y)}")
            if len(self.links) > 255:
                raise ValueError("too many links")

    @property
    def all_hosts(self):
        return self.hosts + (["r"] if self.router else [])

    def __repr__(self):
        return (f"Topology(hosts={self.hosts!r}, links={self.links!r}, queues={self.queues}, "
                f"router={self.router})")


class Iface:
    """One end of a veth pair inside a host."""

    def __init__(self, name, addr, prefixlen, mac, peer_host, peer_ifname, peer_addr, peer_mac):
        self.name = name
        self.addr = addr
        self.prefixlen = prefixlen
        self.mac = mac
        self.peer_host = peer_host
        self.peer_ifname = peer_ifname
        self.peer_addr = peer_addr
        self.peer_mac = peer_mac
        # Set with Topology(ipv6=True): benchmarking range 2001:2::/48 (RFC 5180), /64 per link.
        self.addr6 = None
        self.peer_addr6 = None

    def __repr__(self):
        return f"Iface({self.name} {self.addr}/{self.prefixlen} {self.mac} -> {self.peer_host})"


class Host:
    """A network namespace of the testbed.

    ns, name, ifname (first interface, "veth0"), addr, mac, prefixlen, gateway (router topologies),
    peer_addr / peer_mac (the other end of veth0), ifaces (list of Iface).
    """

    def __init__(self, tb, name, ns):
        self._tb = tb
        self.name = name
        self.ns = ns
        self.ifaces = []
        self.gateway = None
        self.gateway6 = None

    # The first interface is the one tests almost always want.
    @property
    def ifname(self):
        return self.ifaces[0].name

    @property
    def addr(self):
        return self.ifaces[0].addr

    @property
    def mac(self):
        return self.ifaces[0].mac

    @property
    def addr6(self):
        return self.ifaces[0].addr6

    @property
    def peer_addr6(self):
        return self.ifaces[0].peer_addr6

    @property
    def prefixlen(self):
        return self.ifaces[0].prefixlen

    @property
    def peer_addr(self):
        return self.ifaces[0].peer_addr

    @property
    def peer_mac(self):
        return self.ifaces[0].peer_mac

    @property
    def bpffs(self):
        """The host's persistent bpffs as seen from the root mount namespace."""
        return os.path.join(BPFFS_ROOT, self.ns, "bpf")

    def wrap(self, cmd):
        """The argv that runs `cmd` inside this namespace with bpffs mounted."""
        if isinstance(cmd, str):
            cmd = ["sh", "-c", cmd]
        cmd = [os.fspath(c) for c in cmd]
        return [*ns_exec(self.ns), "env", f"SLIP_TB_BPFFS={self.bpffs}",
                "sh", "-c", _NS_WRAPPER, "sh", *cmd]

    def run(self, cmd, check=False, timeout=None, **kw):
        """subprocess.run inside the namespace; stdout/stderr captured as text unless given."""
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        if "input" not in kw:
            kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("text", True)
        r = subprocess.run(self.wrap(cmd), timeout=timeout, **kw)
        r.args = cmd
        if check and r.returncode != 0:
            raise CommandError(r.returncode, cmd, r.stdout, r.stderr)
        return r

    def popen(self, cmd, **kw):
        """Popen inside the namespace, in its own process group; tb.down() kills it."""
        kw.setdefault("start_new_session", True)
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(self.wrap(cmd), **kw)
        self._tb._track(p)
        return p

    def pids(self):
        """PIDs of every process currently inside the namespace."""
        return _ns_pids(self.ns)

    def __repr__(self):
        return f"Host({self.name} ns={self.ns} ifaces={self.ifaces})"


# ---------------------------------------------------------------------------------------------
# namespace helpers shared by Testbed and the CLI

def list_namespaces(prefix=""):
    """Names of the network namespaces (ip netns list) that start with prefix."""
    r = _ip("netns", "list", check=False)
    names = []
    for line in r.stdout.splitlines():
        if not line.strip():
            continue
        name = line.split()[0]
        if name.startswith(prefix):
            names.append(name)
    return names


def _ns_pids(ns):
    r = _ip("netns", "pids", ns, check=False)
    pids = []
    for tok in r.stdout.split():
        if tok.isdigit() and int(tok) != os.getpid():
            pids.append(int(tok))
    return pids


def _signal_pids(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0) but no longer holds the namespace. Not reaped here: it may
    # be a child whose exit status the caller's Popen still wants.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_ns_processes(names, grace=KILL_GRACE_S):
    """SIGTERM everything inside the namespaces, SIGKILL what is left after `grace` seconds."""
    pids = [p for ns in names for p in _ns_pids(ns)]
    if not pids:
        return
    _signal_pids(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    _signal_pids([p for p in pids if _alive(p)], signal.SIGKILL)
    # The kernel keeps a namespace alive while a process holds it: wait until they are gone.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.02)


def _unmount_bpffs(ns):
    d = os.path.join(BPFFS_ROOT, ns)
    mnt = os.path.join(d, "bpf")
    if os.path.ismount(mnt):
        subprocess.run(["umount", "-l", mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    for p in (mnt, d):
        try:
            os.rmdir(p)
        except OSError:
            pass


def remove_namespaces(names, grace=KILL_GRACE_S):
    """Kills the processes inside the namespaces, deletes them (which deletes their veths) and
    unmounts their bpffs. Missing namespaces are fine. Returns the list actually deleted."""
    names = list(names)
    existing = set(list_namespaces())
    _kill_ns_processes([n for n in names if n in existing], grace)
    deleted = []
    for ns in names:
        if ns in existing:
            r = _ip("netns", "del", ns, check=False)
            if r.returncode == 0:
                deleted.append(ns)
        _unmount_bpffs(ns)
    return deleted


# ---------------------------------------------------------------------------------------------

_live = weakref.WeakSet()
_live_lock = threading.Lock()
_tags_in_use = set()


def cleanup_all():
    """Takes down every testbed of this process that is still up (atexit, signal handlers)."""
    with _live_lock:
        tbs = list(_live)
    for tb in tbs:
        try:
            tb.down()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


atexit.register(cleanup_all)


class Testbed:
    __test__ = False  # not a pytest test class despite the name
    """Namespaces named f"{prefix}{tag}-{host}"; tag defaults to the pid (a second testbed alive
    in the same process gets f"{pid}_{n}"). tag="" gives stable names for the CLI."""

    def __init__(self, topo=None, prefix="slt", tag=None, persistent=False):
        self.topo = topo if topo is not None else Topology()
        self.prefix = prefix
        self.persistent = persistent
        with _live_lock:
            if tag is None:
                tag = str(os.getpid())
                n = 0
                while (prefix, tag) in _tags_in_use:
                    n += 1
                    tag = f"{os.getpid()}_{n}"
            self.tag = tag
            _tags_in_use.add((prefix, tag))
        self._procs = []
        self._procs_lock = threading.Lock()
        self._hosts = {}
        self._made = []  # namespaces this object created (or found and reclaimed)
        self.is_up = False
        for h in self.topo.all_hosts:
            self._hosts[h] = Host(self, h, self.ns_name(h))
        self._plan()

    def ns_name(self, host):
        return f"{self.prefix}{self.tag}-{host}"

    @property
    def namespaces(self):
        return [h.ns for h in self._hosts.values()]

    @property
    def hosts(self):
        return dict(self._hosts)

    def host(self, name):
        try:
            return self._hosts[name]
        except KeyError:
            raise KeyError(f"no host {name!r} in {self.topo!r}") from None

    # -- planning: addresses and MACs, computed before anything is created ----------------------
    def _plan(self):
        t = self.topo
        index = {h: i + 1 for i, h in enumerate(t.all_hosts)}
        nif = {h: 0 for h in t.all_hosts}
        self.links = []
        for k, (x, y) in enumerate(t.links):
            if t.router:
                net = f"198.18.{k + 1}"
                ax, ay = f"{net}.1", f"{net}.254"
            else:
                net = f"198.18.{k}"
                ax, ay = f"{net}.1", f"{net}.2"
            mx = f"02:00:00:00:{k + 1:02x}:{index[x]:02x}"
            my = f"02:00:00:00:{k + 1:02x}:{index[y]:02x}"
            ix, iy = f"veth{nif[x]}", f"veth{nif[y]}"
            nif[x] += 1
            nif[y] += 1
            fx, fy = Iface(ix, ax, 24, mx, y, iy, ay, my), Iface(iy, ay, 24, my, x, ix, ax, mx)
            if t.ipv6:
                # like the IPv4 plan: link k is 2001:2:0:<k>::/64 (router: <k+1>, r is ::fe)
                net6 = f"2001:2:0:{k + 1 if t.router else k:x}"
                fx.addr6, fy.addr6 = (str(ipaddress.IPv6Address(f"{net6}::{x}"))
                                      for x in ("1", "fe" if t.router else "2"))
                fx.peer_addr6, fy.peer_addr6 = fy.addr6, fx.addr6
            self._hosts[x].ifaces.append(fx)
            self._hosts[y].ifaces.append(fy)
            self.links.append((x, ix, y, iy))
            if t.router:
                self._hosts[x].gateway = ay
                if t.ipv6:
                    self._hosts[x].gateway6 = fy.addr6
        for h in self._hosts.values():
            if not h.ifaces:
                raise ValueError(f"host {h.name!r} has no link")

    # -- lifecycle --------------------------------------------------------------------------------
    def up(self):
        """Builds the topology; removes leftovers with the same names first. On failure,
        everything made so far is removed and the error re-raised."""
        if self.is_up:
            return self
        if os.geteuid() != 0:
            raise PermissionError("the testbed needs root (network namespaces)")
        remove_namespaces(self.namespaces)
        with _live_lock:
            if not self.persistent:
                _live.add(self)
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        self.is_up = True
        return self

    def _build(self):
        t = self.topo
        for h in self._hosts.values():
            _ip("netns", "add", h.ns)
            self._made.append(h.ns)
            os.makedirs(h.bpffs, exist_ok=True)
            if not os.path.ismount(h.bpffs):
                subprocess.run(["mount", "-t", "bpf", "bpf", h.bpffs], check=False,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        q = str(t.queues)
        for x, ix, y, iy in self.links:
            hx, hy = self._hosts[x], self._hosts[y]
            fx = next(i for i in hx.ifaces if i.name == ix)
            fy = next(i for i in hy.ifaces if i.name == iy)
            _ip("link", "add", ix, "netns", hx.ns, "numtxqueues", q, "numrxqueues", q,
                "address", fx.mac, "type", "veth", "peer", "name", iy, "netns", hy.ns,
                "numtxqueues", q, "numrxqueues", q, "address", fy.mac)
        for h in self._hosts.values():
            sysctls = []
            if not t.ipv6:
                sysctls += ["net.ipv6.conf.all.disable_ipv6=1",
                            "net.ipv6.conf.default.disable_ipv6=1"]
            if t.ipv6:
                # No DAD on the link-local either: while it is tentative the kernel sends no
                # neighbour solicitation of its own accord (ndisc_send_ns wants a usable
                # link-local source), so a resolution asked over netlink would wait for DAD.
                sysctls += [f"net.ipv6.conf.{f.name}.accept_dad=0" for f in h.ifaces]
            if h.name == "r" and t.router:
                sysctls += ["net.ipv4.ip_forward=1"]
                if t.ipv6:
                    sysctls += ["net.ipv6.conf.all.forwarding=1"]
            if sysctls:
                self._nsexec(h, ["sysctl", "-q", "-w", *sysctls])
            _ip("-n", h.ns, "link", "set", "lo", "up")
            for f in h.ifaces:
                _ip("-n", h.ns, "addr", "add", f"{f.addr}/{f.prefixlen}", "dev", f.name)
                if f.addr6:
                    # nodad: usable at once (a tentative address is no source, RFC 4862)
                    _ip("-n", h.ns, "-6", "addr", "add", f"{f.addr6}/64", "dev", f.name, "nodad")
                # A kernel veth peer would otherwise send CHECKSUM_PARTIAL frames (TESTBED.md).
                self._nsexec(h, ["ethtool", "-K", f.name, "tx", "off"])
                _ip("-n", h.ns, "link", "set", f.name, "up")
            if h.gateway:
                _ip("-n", h.ns, "route", "add", "default", "via", h.gateway)
            if h.gateway6:
                _ip("-n", h.ns, "-6", "route", "add", "default", "via", h.gateway6)
        self._wait_carrier()

    def _wait_carrier(self, timeout=3.0):
        # Links report operstate UP a moment after `ip link set up`; tests should not race it.
        deadline = time.monotonic() + timeout
        pending = [(h, f.name) for h in self._hosts.values() for f in h.ifaces]
        while pending and time.monotonic() < deadline:
            still = []
            for h, ifname in pending:
                r = _ip("-n", h.ns, "-o", "link", "show", ifname, check=False)
                if "state UP" not in r.stdout:
                    still.append((h, ifname))
            pending = still
            if pending:
                time.sleep(0.02)

    @staticmethod
    def _nsexec(h, cmd):
        r = subprocess.run([*ns_exec(h.ns), *cmd], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise CommandError(r.returncode, cmd, r.stdout, r.stderr)

    def _track(self, p):
        with self._procs_lock:
            self._procs.append(p)

    def _kill_tracked(self):
        with self._procs_lock:
            procs, self._procs = self._procs, []
        live = [p for p in procs if p.poll() is None]
        for p in live:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                try:
                    p.terminate()
                except OSError:
                    pass
        deadline = time.monotonic() + KILL_GRACE_S
        for p in live:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in live:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
            try:
                p.wait(2)
            except subprocess.TimeoutExpired:
                pass
            # Group members that outlived the leader (e.g. forked workers).
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def down(self):
        """Kills tracked processes, then anything still inside the namespaces, and deletes the
        namespaces (and with them the veths). Safe to call twice."""
        self._kill_tracked()
        remove_namespaces(self.namespaces)
        self._made = []
        self.is_up = False
        with _live_lock:
            _live.discard(self)
            _tags_in_use.discard((self.prefix, self.tag))

    def detach(self):
        """Leaves the testbed up when this process exits (the CLI's `up` without --hold)."""
        with _live_lock:
            _live.discard(self)

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()
        return False

    # -- loss on the router's ports (see the module docstring) -----------------------------------
    def router_loss(self, percent, only_l4=True, build_dir=None):
        if not self.topo.router:
            raise ValueError("router_loss needs a router topology (Topology(router=True))")
        if not 0 <= percent <= 100:
            raise ValueError(f"loss percent must be within 0..100, not {percent}")
        ppm = int(round(percent * 10000))
        loss = getattr(self, "_loss", None)
        if loss and all(p.poll() is None for _, p in loss["procs"].values()):
            if loss["only_l4"] != bool(only_l4):
                raise ValueError("only_l4 cannot change while the loss runs: call "
                                 "router_loss_stats() first")
            for _, p in loss["procs"].values():
                _loss_command(p, f"ppm {ppm}")
            return
        if loss:
            self._loss_stop()
        exe = _tc_loss_path(build_dir)
        r = self.host("r")
        procs = {}
        self._loss = {"only_l4": bool(only_l4), "procs": procs}
        try:
            for f in r.ifaces:
                cmd = [exe, "--iface", f.name, "--ppm", str(ppm)] + (["--only-l4"] if only_l4 else [])
                p = r.popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
                # Keyed by the host the port faces: its ingress carries that host's packets.
                procs[f.peer_host] = (f.name, p)
                line = _read_line(p, 15.0)
                if not line.startswith("attached"):
                    if p.poll() is None:
                        p.kill()
                    _, err = p.communicate()
                    raise CommandError(p.returncode or 1, cmd, line, err)
        except BaseException:
            self._loss_stop()
            raise

    def router_drop_len(self, host, length, count=1):
        """Besides the random loss: the router drops the next `count` IPv4 TCP/UDP packets of
        total length `length` that come from `host` (a tail segment of a size nothing else has).
        Needs router_loss() running; a later router_loss() call cancels what is left."""
        loss = getattr(self, "_loss", None)
        if not loss or host not in loss["procs"]:
            raise RuntimeError("router_drop_len needs router_loss() running")
        _loss_command(loss["procs"][host][1], f"droplen {int(length)} {int(count)}")

    def router_loss_stats(self):
        if not getattr(self, "_loss", None):
            raise RuntimeError("router_loss() is not running")
        return self._loss_stop(strict=True)

    def _loss_stop(self, strict=False):
        """Closes every loader's stdin (it prints its counters and detaches) and collects them."""
        loss, self._loss = getattr(self, "_loss", None), None
        stats = {}
        total = {"passed": 0, "dropped": 0, "skipped": 0, "gso": 0}
        errors = []
        for host, (ifname, p) in (loss["procs"] if loss else {}).items():
            if p.returncode is not None and p.stdout.closed:
                continue  # already collected (a failed start)
            try:
                # communicate() closes stdin: EOF tells tc_loss to print its counters and detach.
                out, err = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            counters = _parse_loss_counters(out)
            if p.returncode != 0 or counters is None:
                errors.append(f"tc_loss on r:{ifname} exited {p.returncode}: "
                              f"{(err or '').strip() or (out or '').strip()}")
                continue
            for k in total:
                total[k] += counters[k]
            stats[host] = _with_rate(counters)
        stats["total"] = _with_rate(total)
        if errors and strict:
            raise RuntimeError("; ".join(errors))
        return stats

    def describe(self):
        """Human-readable lines: namespaces, interfaces, addresses, how to enter."""
        lines = []
        for h in self._hosts.values():
            lines.append(f"{h.name}: ip netns exec {h.ns} bash")
            for f in h.ifaces:
                lines.append(f"    {f.name} {f.addr}/{f.prefixlen} {f.mac} -> "
                             f"{f.peer_host}:{f.peer_ifname} {f.peer_addr}")
            if h.gateway:
                lines.append(f"    default via {h.gateway}")
        return lines

    def __repr__(self):
        return f"Testbed({self.topo!r}, namespaces={self.namespaces}, up={self.is_up})"


def _tc_loss_path(build_dir):
    if build_dir is None:
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        build_dir = os.environ.get("SLIP_BUILD", os.path.join(repo, "build"))
    exe = os.path.join(os.path.abspath(os.fspath(build_dir)), "tests", "prog", "tc_loss")
    if not os.access(exe, os.X_OK):
        raise FileNotFoundError(f"{exe} is not built (ninja -C {build_dir} tests/prog/tc_loss)")
    return exe


def _read_line(p, timeout):
    """One stdout line of a text-mode Popen, or "" on EOF or timeout."""
    if not select.select([p.stdout], [], [], timeout)[0]:
        return ""
    return p.stdout.readline().strip()


def _loss_command(p, line):
    p.stdin.write(line + "\n")
    p.stdin.flush()
    ack = _read_line(p, 10.0)
    if ack != line:
        raise RuntimeError(f"tc_loss did not take {line!r} (answered {ack!r})")


def _parse_loss_counters(out):
    for line in reversed((out or "").splitlines()):
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if "passed" in fields and "dropped" in fields:
            try:
                return {k: int(fields.get(k, 0)) for k in ("passed", "dropped", "skipped", "gso")}
            except ValueError:
                return None
    return None


def _with_rate(c):
    c = dict(c)
    n = c["passed"] + c["dropped"]
    c["rate"] = c["dropped"] / n if n else 0.0
    return c


def shell_join(cmd):
    return " ".join(shlex.quote(c) for c in cmd)
