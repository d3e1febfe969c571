"""System tests of the control plane (src/ctl) through tests/prog/ctl_dump: the mirrored tables
match what `ip` shows in a testbed host, live netlink updates reach them, a re-dump repairs lost
updates (ENOBUFS), and neighbour resolution is done by the kernel's own ARP.
"""

import json
import os
import re
import select
import subprocess
import time

import pytest

from testbed import Topology

PREFIX = "slc"


@pytest.fixture
def tb(make_testbed):
    return make_testbed(Topology(), prefix=PREFIX)


@pytest.fixture
def ctl_dump(slip_bin):
    return slip_bin("tests/prog/ctl_dump")


def ifindex(h, name="veth0"):
    out = h.run(["ip", "-j", "link", "show", name], check=True, timeout=30).stdout
    return json.loads(out)[0]["ifindex"]


def kernel_neigh(h):
    out = h.run(["ip", "-j", "-4", "neigh", "show"], check=True, timeout=30).stdout
    return json.loads(out) if out.strip() else []


def section(out, title):
    """Lines of the table block that starts with '# <title>' (up to the next block)."""
    lines, inside = [], False
    for line in out.splitlines():
        if line.startswith("# "):
            inside = line.startswith(f"# {title} ")
            continue
        if inside and re.match(r"(link|addr6?|route6?|neigh6?) ", line):
            lines.append(line)
    return lines


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def find(lines, kind, **want):
    """The entries of `kind` whose fields include every key=value of want."""
    return [fields(l) for l in lines if l.startswith(kind + " ")
            and all(fields(l).get(k) == str(v) for k, v in want.items())]


def wait_for_line(p, prefix, timeout=10.0):
    """Reads p.stdout (unbuffered bytes, so communicate() later loses nothing) until a line
    starting with prefix; returns everything read so far."""
    buf = b""
    fd = p.stdout.fileno()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(l.startswith(prefix.encode()) for l in buf.split(b"\n")[:-1]):
            return buf.decode()
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
    pytest.fail(f"ctl_dump never printed {prefix!r}; got:\n{buf.decode(errors='replace')}")


def start_watch(h, ctl_dump, *args, env=()):
    cmd = ["env", *env, ctl_dump, *args] if env else [ctl_dump, *args]
    p = h.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    head = wait_for_line(p, "watching")
    return p, head


def finish(p, head, timeout=30):
    out, err = p.communicate(timeout=timeout)
    out, err = out.decode(errors="replace"), err.decode(errors="replace")
    assert p.returncode == 0, f"ctl_dump failed ({p.returncode}):\n{err}"
    return head + out, err


def test_dump_matches_kernel(tb, ctl_dump):
    b = tb.host("b")
    idx = ifindex(b)
    out = b.run([ctl_dump, "--route", "198.18.0.1"], check=True, timeout=30).stdout
    lines = section(out, "tables")

    links = find(lines, "link", name="veth0")
    assert len(links) == 1, out
    assert links[0]["ifindex"] == str(idx)
    assert links[0]["mtu"] == "1500"
    assert links[0]["mac"] == b.mac.lower()
    assert find(lines, "link", name="lo"), out

    assert find(lines, "addr", ifindex=idx, addr=f"{b.addr}/24"), out
    conn = find(lines, "route", dst="198.18.0.0/24", oif=idx)
    assert len(conn) == 1, out
    assert conn[0]["gw"] == "0.0.0.0" and conn[0]["src"] == b.addr and conn[0]["table"] == "254"
    # Only the main table: the local table's 198.18.0.2/32 and broadcast routes are not mirrored.
    assert not find(lines, "route", dst=f"{b.addr}/32"), out

    nh = [l for l in out.splitlines() if l.startswith("nexthop ")]
    assert nh == [f"nexthop dst=198.18.0.1 ifindex={idx} via=198.18.0.1 src={b.addr} mtu=1500 type=unicast"]


def test_live_updates(tb, ctl_dump):
    b = tb.host("b")
    idx = ifindex(b)
    p, head = start_watch(b, ctl_dump, "--watch", "4", "--route", "198.18.50.7")
    for cmd in (["ip", "addr", "add", "198.18.9.1/32", "dev", "veth0"],
                ["ip", "route", "add", "198.18.50.0/24", "via", "198.18.0.1", "mtu", "1400"],
                ["ip", "route", "add", "198.18.51.0/24", "via", "198.18.0.1"],
                ["ip", "route", "del", "198.18.51.0/24"],
                ["ip", "link", "set", "veth0", "mtu", "1400"]):
        b.run(cmd, check=True, timeout=30)
    out, err = finish(p, head)

    # Seen as updates while watching, not only in a dump at the end.
    updates = [l for l in out.splitlines() if l.startswith("update +")]
    assert any("addr=198.18.9.1/32" in l for l in updates), out
    assert any("dst=198.18.50.0/24" in l for l in updates), out
    assert any(l.startswith("update +link") and "mtu=1400" in l for l in updates), out

    final = section(out, "final")
    assert find(final, "addr", ifindex=idx, addr="198.18.9.1/32"), out
    r = find(final, "route", dst="198.18.50.0/24")
    assert len(r) == 1 and r[0]["gw"] == "198.18.0.1" and r[0]["mtu"] == "1400" \
        and r[0]["oif"] == str(idx), out
    assert not find(final, "route", dst="198.18.51.0/24"), out
    assert find(final, "link", name="veth0", mtu=1400), out

    nh = [fields(l) for l in out.splitlines() if l.startswith("nexthop ")]
    assert len(nh) == 1, out
    assert nh[0]["via"] == "198.18.0.1" and nh[0]["mtu"] == "1400" and nh[0]["ifindex"] == str(idx)
    # The /32 added on veth0 is not on the gateway's subnet; the source stays the /24 address.
    assert nh[0]["src"] == b.addr, out


def test_link_down_flushes_routes(tb, ctl_dump):
    """IPv4 drops routes through a device that goes down without telling netlink listeners."""
    b = tb.host("b")
    b.run(["ip", "route", "add", "198.18.60.0/24", "via", "198.18.0.1"], check=True, timeout=30)
    p, head = start_watch(b, ctl_dump, "--watch", "3", "--route", "198.18.60.1")
    b.run(["ip", "link", "set", "veth0", "down"], check=True, timeout=30)
    out, _ = finish(p, head)
    assert find(section(out, "tables"), "route", dst="198.18.60.0/24"), out
    assert "198.18.60.0/24" not in b.run(["ip", "route"], check=True, timeout=30).stdout
    assert not find(section(out, "final"), "route", dst="198.18.60.0/24"), out
    assert "nexthop dst=198.18.60.1 error=Network is unreachable" in out


def test_lost_updates_redump(tb, ctl_dump):
    """A tiny event socket buffer and a sleeping reader make the kernel drop notifications
    (ENOBUFS); ctl__process must notice and re-dump."""
    b = tb.host("b")
    n = 300
    batch = "".join(f"route add 198.19.{i // 256}.{i % 256}/32 via 198.18.0.1\n" for i in range(n))
    p, head = start_watch(b, ctl_dump, "--watch", "4", "--pause", "2", "--rcvbuf", "4096",
                          env=["SLIP_LOG=info"])
    b.run(["ip", "-batch", "-"], input=batch, check=True, timeout=30)
    out, err = finish(p, head)
    assert "overran the socket buffer, re-dumping" in err, err
    final = section(out, "final")
    got = {f["dst"] for f in (fields(l) for l in final if l.startswith("route "))}
    want = {f"198.19.{i // 256}.{i % 256}/32" for i in range(n)}
    assert want <= got, f"missing {sorted(want - got)[:5]}..."


def test_resolve_is_kernel_arp(tb, ctl_dump):
    a, b = tb.host("a"), tb.host("b")
    for h in (a, b):
        h.run(["ip", "neigh", "flush", "dev", "veth0"], check=True, timeout=30)
    assert not [e for e in kernel_neigh(b) if e["dst"] == a.addr and "lladdr" in e]

    p, head = start_watch(b, ctl_dump, "--resolve", "veth0", a.addr, "--watch", "2")
    out, _ = finish(p, head)
    assert re.search(r"^resolve ifindex=\d+ ip=198\.18\.0\.1 rc=0$", out, re.M), out
    n = find(section(out, "final"), "neigh", ip=a.addr)
    assert len(n) == 1, out
    assert n[0]["mac"] == a.mac.lower() and n[0]["state"] == "REACHABLE", out

    # b's kernel holds the entry (it ran ARP); a's kernel only learned b from that ARP request.
    kb = [e for e in kernel_neigh(b) if e["dst"] == a.addr]
    assert kb and kb[0].get("lladdr") == a.mac.lower(), kb
    ka = kernel_neigh(a)
    assert all(e["dst"] == b.addr and e.get("lladdr") == b.mac.lower() for e in ka), ka
    assert all("PERMANENT" not in e.get("state", []) for e in ka), ka


def test_resolve_keeps_permanent_entry(tb, ctl_dump):
    """NTF_USE would strip NUD_PERMANENT from a static entry; ctl__resolve must leave it alone."""
    b = tb.host("b")
    b.run(["ip", "neigh", "add", "198.18.0.77", "lladdr", "02:00:00:00:00:77", "dev", "veth0",
           "nud", "permanent"], check=True, timeout=30)
    out = b.run([ctl_dump, "--resolve", "veth0", "198.18.0.77"], check=True, timeout=30).stdout
    assert find(section(out, "tables"), "neigh", ip="198.18.0.77", state="PERMANENT"), out
    e = [e for e in kernel_neigh(b) if e["dst"] == "198.18.0.77"]
    assert e and "PERMANENT" in e[0]["state"], e


@pytest.fixture
def tb6(make_testbed):
    return make_testbed(Topology(ipv6=True))


def test_ipv6_dump_route_and_kernel_nd(tb6, ctl_dump):
    """IPv6 is mirrored like IPv4: the host's addresses (global and link-local), the per-link
    routes, a route lookup with its RFC 6724 source, and neighbours that only the kernel's ND
    resolves (after `ip -6 neigh flush`, --resolve6 makes the kernel solicit again)."""
    a, b = tb6.host("a"), tb6.host("b")
    idx = ifindex(b)
    b.run(["ip", "-6", "route", "add", "2001:2:77::/48", "via", a.addr6, "mtu", "1400"], check=True, timeout=30)
    for h in (a, b):
        h.run(["ip", "-6", "neigh", "flush", "dev", "veth0"], check=True, timeout=30)
    p, head = start_watch(b, ctl_dump, "--resolve6", "veth0", a.addr6, "--watch", "2",
                          "--route6", "2001:2:77::9")
    out, _ = finish(p, head)
    tables = section(out, "tables")
    assert find(tables, "addr6", ifindex=idx, addr=f"{b.addr6}/64"), out
    assert [l for l in tables if l.startswith("addr6 ") and f"ifindex={idx} addr=fe80:" in l], out
    assert not find(tables, "addr", addr=f"{b.addr6}/64"), out      # not in the IPv4 table
    r = find(tables, "route6", dst="2001:2::/64", oif=idx)
    assert len(r) == 1 and r[0]["gw"] == "::" and r[0]["table"] == "254", out
    assert find(tables, "route6", dst="fe80::/64", oif=idx), out
    r = find(tables, "route6", dst="2001:2:77::/48")
    assert len(r) == 1 and r[0]["gw"] == a.addr6 and r[0]["mtu"] == "1400", out

    assert re.search(rf"^resolve ifindex={idx} ip={re.escape(a.addr6)} rc=0$", out, re.M), out
    n = find(section(out, "final"), "neigh6", ip=a.addr6)
    assert len(n) == 1, out
    assert n[0]["mac"] == a.mac.lower() and n[0]["state"] == "REACHABLE", out
    nh = [l for l in out.splitlines() if l.startswith("nexthop6 ")]
    assert nh == [f"nexthop6 dst=2001:2:77::9 ifindex={idx} via={a.addr6} src={b.addr6} mtu=1400 type=unicast"], out

    # a flush reaches the mirror as a deletion (or a FAILED/NONE state), never a stale MAC
    p, head = start_watch(b, ctl_dump, "--watch", "2")
    b.run(["ip", "-6", "neigh", "flush", "dev", "veth0"], check=True, timeout=30)
    out, _ = finish(p, head)
    assert not find(section(out, "final"), "neigh6", ip=a.addr6, state="REACHABLE"), out
