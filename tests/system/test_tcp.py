"""The stack's TCP against real Linux peers (issue 3, "How it is checked"): tests/prog/tcp_tool
runs the stack in host b, kernel peers (peers/tcp_bulk.py, peers/tcp_many.py, raw-socket
injectors) run in host a. Bulk transfers on a clean link, under router loss (tc BPF at the
router's ingress), under the stack's own reordering/duplication, into a tiny receive window;
1,000 concurrent connections with a leak check; blind injections, malformed options and a SYN
flood. Every test prints what it measured.

Sizes: SLIP_TCP_BYTES (clean link, default 1G), SLIP_TCP_LOSS_BYTES (per direction and loss rate,
default 32M: see LOSS_DEFAULT), SLIP_TCP_FAULT_BYTES (default 1G).
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from testbed import Topology

HERE = os.path.dirname(os.path.abspath(__file__))
BULK = os.path.join(HERE, "peers", "tcp_bulk.py")
MANY = os.path.join(HERE, "peers", "tcp_many.py")
PY = sys.executable
MiB = 1 << 20
RING = 2048     # default SLIP_RING_SIZE: the fill ring holds this many frames when idle

# 1 GiB at 5 % loss each way takes far more than 2 minutes per direction here (kernel to kernel
# 50 MiB took seconds, but the stack as sender managed 0.3 MB/s at 5 %: see the RTO check).
# 32 MiB is still ~23,000 data segments per direction, ~1,150 drops at 5 % and ~230 at 1 %:
# enough for every recovery path to run many times.
LOSS_DEFAULT = "32M"


def size(env, default):
    s = os.environ.get(env, default).strip().lower()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


@pytest.fixture(scope="module")
def tool(build_dir):
    exe = build_dir / "tests" / "prog" / "tcp_tool"
    if not exe.exists():
        pytest.skip(f"not built: {exe} (ninja -C {build_dir} tests/prog/tcp_tool)")
    return str(exe)


def counters_of(text):
    """`group.name value` lines -> dict; `tcpconn ...` lines -> list of dicts."""
    c, conns = {}, []
    for line in (text or "").splitlines():
        m = re.match(r"^([A-Za-z_][\w.]*) (\d+)$", line)
        if m:
            c[m.group(1)] = int(m.group(2))
        elif line.startswith("tcpconn "):
            f = line.split()
            d = {"idx": f[1], "state": f[2], "local": f[3], "remote": f[4]}
            d.update(kv.split("=", 1) for kv in f[5:] if "=" in kv)
            conns.append(d)
    return c, conns


def json_of(text, who):
    lines = [l for l in (text or "").splitlines() if l.startswith("{")]
    assert lines, f"{who} printed no JSON line: {text[-2000:]!r}"
    return json.loads(lines[-1])


def nonzero(c, *prefixes):
    return {k: v for k, v in sorted(c.items()) if v and (not prefixes or k.startswith(prefixes))}


def nstat(host):
    out = host.run(["nstat", "-asz"], check=True, timeout=10).stdout
    vals = {}
    for line in out.splitlines():
        p = line.split()
        if len(p) >= 2 and p[1].isdigit():
            vals[p[0]] = int(p[1])
    return vals


def tool_env(extra):
    e = dict(os.environ)
    e.update(extra or {})
    return e


def wait_ready(p, who):
    skipped = []
    for _ in range(10):     # warnings (e.g. "fault injection on") may come first
        line = p.stderr.readline()
        if isinstance(line, bytes):
            line = line.decode(errors="replace")
        if not line.startswith("slipstream: warning"):
            break
        skipped.append(line)
    if not line.startswith("ready"):
        p.kill()
        rest = p.stderr.read()
        pytest.fail(f"{who} did not start: {line!r} {rest!r}")
    return int(line.split("=")[1])


def finish(procs, timeout):
    """communicate() with every process; on timeout kill them all and fail with what they said."""
    deadline = time.monotonic() + timeout
    outs = {}
    try:
        for name, p in procs:
            outs[name] = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
        said = {n: [(x or b"")[-1500:] for x in p.communicate()] for n, p in procs}
        pytest.fail(f"timed out after {timeout} s: {said}")
    return outs


def kernel_to_stack(a, b, tool, nbytes, seed, env=None, port=5001, timeout=600):
    """a (kernel, tcp_bulk send) -> b (tcp_tool serve-recv | tcp_bulk check)."""
    t = b.popen([tool, "--iface", b.ifname, "--counters", "serve-recv", str(port)], env=tool_env(env),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    chk = b.popen([PY, BULK, "check", str(nbytes), "--seed", str(seed)], stdin=t.stdout,
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t.stdout.close()
    wait_ready(t, "tcp_tool serve-recv")
    snd = a.popen([PY, BULK, "send", b.addr, str(port), str(nbytes), "--seed", str(seed)],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    outs = finish([("send", snd), ("check", chk), ("tool", t)], timeout)
    terr = outs["tool"][1].decode(errors="replace")
    res = {
        "sender": json_of(outs["send"][0].decode(), f"tcp_bulk send (rc={snd.returncode}) "
                          f"{outs['send'][1][-500:]!r}"),
        "receiver": json_of(outs["check"][0].decode(), f"tcp_bulk check (rc={chk.returncode})"),
        "tool": json_of(terr, f"tcp_tool (rc={t.returncode})"),
        "tool_rc": t.returncode, "tool_stderr": terr,
    }
    res["counters"], res["conns"] = counters_of(terr)
    return res


def stack_to_kernel(a, b, tool, nbytes, seed, env=None, port=5002, recv_args=(), timeout=600,
                    during=None):
    """b (tcp_bulk gen | tcp_tool connect-send) -> a (kernel, tcp_bulk recv).
    during(tool_popen) runs once the transfer has started, if given."""
    rcv = a.popen([PY, BULK, "recv", str(port), str(nbytes), "--seed", str(seed), *recv_args],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = rcv.stderr.readline()
    assert line.startswith("listening"), line + rcv.stderr.read()
    gen = b.popen([PY, BULK, "gen", str(nbytes), "--seed", str(seed)], stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
    t = b.popen([tool, "--iface", b.ifname, "--counters", "connect-send", a.addr, str(port)],
                env=tool_env(env), stdin=gen.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    gen.stdout.close()
    extra = during(t) if during else None
    outs = finish([("tool", t), ("gen", gen), ("recv", rcv)], timeout)
    tout = outs["tool"][0].decode(errors="replace")
    terr = outs["tool"][1].decode(errors="replace")
    res = {
        "sender": json_of(outs["gen"][1].decode(), f"tcp_bulk gen (rc={gen.returncode})"),
        "receiver": json_of(outs["recv"][0], f"tcp_bulk recv (rc={rcv.returncode}) {outs['recv'][1][-500:]!r}"),
        "tool": json_of(terr, f"tcp_tool (rc={t.returncode}) stdout={tout[-1500:]!r}"),
        "tool_rc": t.returncode, "tool_stderr": terr, "extra": extra,
    }
    res["counters"], res["conns"] = counters_of(tout)
    return res


def check_intact(res, nbytes, what):
    s, r, t = res["sender"], res["receiver"], res["tool"]
    print(f"  {what}: {nbytes} bytes, receiver {r.get('seconds')} s = {r.get('mbytes_per_s')} MB/s; "
          f"tcp_tool {t.get('seconds')} s = {t.get('mbytes_per_s')} MB/s")
    assert res["tool_rc"] == 0, f"{what}: tcp_tool failed: {res['tool_stderr'][-2000:]}"
    assert s["ok"], f"{what}: sender failed: {s}"
    assert r["ok"], f"{what}: receiver failed: {r}"
    assert r["first_diff"] is None, r
    assert s["bytes"] == r["bytes"] == t["bytes"] == nbytes, (s, r, t)
    assert s["sha256"] == r["sha256"], (s, r)
    assert t["unexpected_bytes"] == 0, t


def conn_stat(res, key):
    return sum(int(c.get(key, 0)) for c in res["conns"])


def check_pool(c):
    """Idle: every frame is in the pool or posted on the fill ring (which is refilled in batches
    of a quarter ring, so at least 3/4 of it is posted)."""
    assert c["pool.free"] + c["pool.fill_posted"] == c["pool.frames"], \
        f"frames leaked: pool.free={c['pool.free']} + fill_posted={c['pool.fill_posted']} != frames={c['pool.frames']}"
    assert c["pool.fill_posted"] >= RING - RING // 4, c


# ---------------------------------------------------------------------------------------------
# (a) clean link

@pytest.mark.parametrize("direction", ["kernel_to_stack", "stack_to_kernel"])
def test_bulk_clean_link(testbed, tool, direction):
    """1 GiB each way on one veth pair (the heaviest case: seconds, not minutes)."""
    a, b = testbed.host("a"), testbed.host("b")
    n = size("SLIP_TCP_BYTES", "1G")
    t0 = time.monotonic()
    fn = kernel_to_stack if direction == "kernel_to_stack" else stack_to_kernel
    res = fn(a, b, tool, n, seed=21)
    print(f"\n{direction} clean: wall {time.monotonic() - t0:.1f} s; stack tcp "
          f"{nonzero(res['counters'], 'tcp.')}")
    check_intact(res, n, direction)
    c = res["counters"]
    assert c["tcp.bad_csum"] == 0 and c["tcp.bad_header"] == 0, nonzero(c, "tcp.")
    check_pool(c)


# ---------------------------------------------------------------------------------------------
# (b) random loss at the router

@pytest.fixture
def router_tb(make_testbed, build_dir):
    if not (build_dir / "tests" / "prog" / "tc_loss").is_file():
        pytest.skip(f"not built: tc_loss (ninja -C {build_dir} tests/prog/tc_loss)")
    tb = make_testbed(Topology(router=True))
    tb.build_dir = build_dir
    return tb


@pytest.mark.parametrize("percent", [1, 5])
@pytest.mark.parametrize("direction", ["kernel_to_stack", "stack_to_kernel"])
def test_bulk_under_loss(router_tb, tool, direction, percent):
    tb = router_tb
    a, b = tb.host("a"), tb.host("b")
    n = size("SLIP_TCP_LOSS_BYTES", LOSS_DEFAULT)
    fn = kernel_to_stack if direction == "kernel_to_stack" else stack_to_kernel
    tb.router_loss(percent, only_l4=True, build_dir=tb.build_dir)
    t0 = time.monotonic()
    try:
        res = fn(a, b, tool, n, seed=30 + percent)
    finally:
        stats = tb.router_loss_stats()
    wall = time.monotonic() - t0
    ka = nstat(a)
    c = res["counters"]
    print(f"\n{direction} at {percent}% loss each way: wall {wall:.1f} s")
    for k in ("a", "b"):
        s = stats[k]
        print(f"  router, from {k}: passed={s['passed']} dropped={s['dropped']} rate={s['rate'] * 100:.2f}%")
    print(f"  stack tcp: {nonzero(c, 'tcp.')}")
    print(f"  stack per connection: retrans={conn_stat(res, 'retrans')} {res['conns']}")
    print(f"  kernel (a): TcpRetransSegs={ka.get('TcpRetransSegs', 0)} "
          f"TCPTimeouts={ka.get('TcpExtTCPTimeouts', 0)} TCPSACKRecovery={ka.get('TcpExtTCPSackRecovery', 0)}")
    check_intact(res, n, f"{direction} {percent}%")
    for k in ("a", "b"):
        assert stats[k]["dropped"] > 0, f"the router dropped nothing from {k}: {stats[k]}"
        # Loose bound: the exact binomial check lives in test_loss_router.py.
        assert 0.3 * percent < stats[k]["rate"] * 100 < 2 * percent, stats[k]
    if direction == "stack_to_kernel":
        # The stack sent the data: it must have retransmitted the dropped segments.
        assert c["tcp.retransmits"] > 0, nonzero(c, "tcp.")
        assert c["tcp.retransmits"] >= stats["b"]["dropped"] // 4, (c["tcp.retransmits"], stats["b"])
        # Loss recovery should come from SACK/fast retransmit, with the RTO as the exception
        # (Linux at 5 % here: TCPTimeouts 0-3 per 16 MiB). Data integrity was checked above.
        rto, rxt = c["tcp.rto_expiries"], c["tcp.retransmits"]
        print(f"  stack RTO expiries {rto} of {rxt} retransmits ({100 * rto / max(rxt, 1):.0f}%)")
        assert rto * 10 <= rxt, (f"{rto} RTO expiries for {rxt} retransmits at "
                                 f"{percent}% loss; {n} bytes took {res['tool']['seconds']} s")
    else:
        # The kernel sent the data: it retransmitted what the router dropped.
        assert ka.get("TcpRetransSegs", 0) > 0, ka
    check_pool(c)


# ---------------------------------------------------------------------------------------------
# (c) reordering and duplication by the stack's fault injector

@pytest.mark.parametrize("direction", ["kernel_to_stack", "stack_to_kernel"])
def test_bulk_reorder_and_duplicate(testbed, tool, direction):
    a, b = testbed.host("a"), testbed.host("b")
    n = size("SLIP_TCP_FAULT_BYTES", "1G")
    env = {"SLIP_FAULT_REORDER": "20000", "SLIP_FAULT_DUP": "10000", "SLIP_FAULT_SEED": "7"}
    fn = kernel_to_stack if direction == "kernel_to_stack" else stack_to_kernel
    t0 = time.monotonic()
    res = fn(a, b, tool, n, seed=41, env=env)
    c = res["counters"]
    ka = nstat(a)
    print(f"\n{direction} with 2% reordered, 1% duplicated frames: wall {time.monotonic() - t0:.1f} s")
    print(f"  fault: {nonzero(c, 'fault.')}")
    print(f"  stack tcp: {nonzero(c, 'tcp.')}")
    print(f"  kernel (a): TcpRetransSegs={ka.get('TcpRetransSegs', 0)} "
          f"TCPSACKReorder={ka.get('TcpExtTCPSACKReorder', 0)} TCPDSACKRecv={ka.get('TcpExtTCPDSACKRecv', 0)}")
    check_intact(res, n, direction)
    assert c["fault.reordered"] > 0 and c["fault.duplicated"] > 0, nonzero(c, "fault.")
    check_pool(c)


# ---------------------------------------------------------------------------------------------
# (d) zero windows

def test_stack_sends_into_a_tiny_receive_window(testbed, tool):
    """The kernel reader has a 4 KiB SO_RCVBUF and stops for 300 ms after every 4 MiB, so its
    window closes and the stack must probe it (persist timer) and resume."""
    a, b = testbed.host("a"), testbed.host("b")
    n = 20 * MiB
    t0 = time.monotonic()
    res = stack_to_kernel(a, b, tool, n, seed=51, timeout=300,
                          recv_args=["--rcvbuf", "4096", "--pause-ms", "300", "--pause-every", "4M"])
    ka = nstat(a)
    c = res["counters"]
    print(f"\nzero window: wall {time.monotonic() - t0:.1f} s; kernel receiver "
          f"ToZeroWindowAdv={ka.get('TcpExtTCPToZeroWindowAdv', 0)} "
          f"FromZeroWindowAdv={ka.get('TcpExtTCPFromZeroWindowAdv', 0)}")
    print(f"  stack tcp: {nonzero(c, 'tcp.')}; connections: {res['conns']}")
    check_intact(res, n, "stack->kernel, 4 KiB rcvbuf")
    assert ka.get("TcpExtTCPToZeroWindowAdv", 0) > 0, "the receiver never advertised a zero window"
    # The engine counts probes per connection; they are checked when the dump shows them.
    probes = [int(x[k]) for x in res["conns"] for k in ("zwp", "zero_window_probes") if k in x]
    if probes:
        assert sum(probes) > 0, res["conns"]
    check_pool(c)


# ---------------------------------------------------------------------------------------------
# (e) 1,000 concurrent connections

class Tool:
    """tcp_tool in a long-running mode (echo); stop() returns its counters."""

    def __init__(self, host, exe, args, env=None):
        self.p = host.popen([exe, "--iface", host.ifname, "--counters", *args], env=tool_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.port = wait_ready(self.p, "tcp_tool " + " ".join(args))

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            out, err = self.p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
            pytest.fail(f"tcp_tool did not stop on SIGTERM: {err[-2000:]}")
        self.rc, self.stderr = self.p.returncode, err
        self.counters, self.conns = counters_of(out)
        return self.counters


def test_1000_concurrent_connections_three_rounds(testbed, tool):
    a, b = testbed.host("a"), testbed.host("b")
    echo = Tool(b, tool, ["echo", "7", "--max-conns", "4096"])
    t0 = time.monotonic()
    r = a.run([PY, MANY, b.addr, str(echo.port), "--conns", "1000", "--rounds", "3"], timeout=400)
    wall = time.monotonic() - t0
    time.sleep(2)   # the clients closed first: the stack's LAST_ACKs finish within an RTT
    c = echo.stop()
    print(f"\n1000 x 3 echo: wall {wall:.1f} s; client {r.stdout.strip()} {r.stderr[-1000:]}")
    print(f"  echo: {nonzero(c, 'echo.')}")
    print(f"  stack tcp: {nonzero(c, 'tcp.')}")
    print(f"  ports: {nonzero(c, 'xsk.', 'ip.', 'stack.')}")
    print(f"  pool: {nonzero(c, 'pool.')}; still listed: {len(echo.conns)} {echo.conns[:5]}")
    res = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
    assert r.returncode == 0 and res.get("ok") == 3000, (res, r.stderr[-2000:])
    assert echo.rc == 0, echo.stderr[-2000:]
    assert c["echo.accepted"] == 3000 and c["echo.closed"] == 3000 and c["echo.open"] == 0, nonzero(c, "echo.")
    assert c["echo.errors"] == 0, nonzero(c, "echo.")
    # Only the listener is left: no connection, no port reservation, no frame held.
    assert c["tcp.conns"] == 1, (c["tcp.conns"], echo.conns[:20])
    assert [x["state"] for x in echo.conns] == ["LISTEN"], echo.conns[:20]
    assert c["tcp.res_pending"] == 0, c["tcp.res_pending"]
    assert c["tcp.passive_opens"] >= 3000, nonzero(c, "tcp.")
    check_pool(c)


# ---------------------------------------------------------------------------------------------
# (f) malicious input

INJECT = r"""
import random, socket, struct, sys, time
iface, dmac, smac, src, dst, kport = sys.argv[1:7]
kport = int(kport)
mac = lambda m: bytes(int(x, 16) for x in m.split(":"))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((iface, 0))
s.settimeout(10)
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
def seg(sport, dport, seq, ack, flags, data=b"", opts=b"", doff=None):
    hl = 20 + len(opts)
    off = (doff if doff is not None else hl // 4) << 4
    h = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xffffffff, ack & 0xffffffff, off, flags, 65535, 0, 0) + opts
    ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(h) + len(data))
    c = csum(ph + h + data)
    tcp = h[:16] + struct.pack("!H", c) + h[18:] + data
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), random.randrange(65536), 0x4000, 64, 6, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return mac(dmac) + mac(smac) + b"\x08\x00" + ip + tcp
# Learn the connection from the kernel's own ACKs (a:kport -> b): its seq is the stack's
# rcv_nxt (the kernel sends no data), its ack a recent snd_una of the stack.
seen = 0
while seen < 20:
    f = s.recv(2048)
    if len(f) < 54 or f[12:14] != b"\x08\x00" or f[23] != 6:
        continue
    ihl = (f[14] & 15) * 4
    t = f[14 + ihl:]
    sp, dp, sq, ak = struct.unpack("!HHII", t[:12])
    if socket.inet_ntoa(f[26:30]) == src and socket.inet_ntoa(f[30:34]) == dst and sp == kport:
        seen += 1
        port, rcv_nxt, una = dp, sq, ak
ACK, RST, SYN, PSH = 0x10, 0x04, 0x02, 0x08
sent = {}
def send(name, frame, n=3):
    for _ in range(n):
        s.send(frame)
        time.sleep(0.01)
    sent[name] = n
send("rst_out_of_window", seg(kport, port, rcv_nxt + 0x40000000, 0, RST))
send("rst_in_window", seg(kport, port, rcv_nxt + 1, 0, RST))
send("syn_established", seg(kport, port, random.randrange(1 << 32), 0, SYN))
send("data_ack_too_old", seg(kport, port, rcv_nxt, una - 0x40000000, ACK | PSH, b"EVIL" * 4))
send("data_ack_unsent", seg(kport, port, rcv_nxt, una + 0x40000000, ACK | PSH, b"EVIL" * 4))
# Options: a TS option of length 0, and an MSS option whose length runs past the header.
send("opt_len_0", seg(kport, port, rcv_nxt, una, ACK, opts=b"\x01\x01\x08\x00"))
send("opt_past_header", seg(kport, port, rcv_nxt, una, ACK, opts=b"\x01\x01\x02\x0a"))
print("port", port, "rcv_nxt", rcv_nxt, "una", una, "sent", sent, flush=True)
"""


def test_blind_injection_and_bad_options_do_not_break_a_transfer(testbed, tool):
    """RFC 5961 cases and malformed options, aimed at an established connection while the stack
    sends 64 MiB to a slow kernel reader (so the injection lands mid-transfer)."""
    a, b = testbed.host("a"), testbed.host("b")
    n = 64 * MiB
    port = 5003

    def inject(_t):
        return a.popen([PY, "-c", INJECT, a.ifname, b.mac, a.mac, a.addr, b.addr, str(port)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    res = stack_to_kernel(a, b, tool, n, seed=61, port=port, timeout=300, during=inject,
                          recv_args=["--pause-ms", "200", "--pause-every", "4M"])
    inj = res["extra"]
    iout, ierr = inj.communicate(timeout=30)
    c = res["counters"]
    print(f"\ninjector: {iout.strip()} {ierr[-1500:]}")
    print(f"  stack tcp: {nonzero(c, 'tcp.')}")
    assert inj.returncode == 0 and "sent" in iout, ierr
    check_intact(res, n, "stack->kernel under injection")
    # In-window RST (3), SYN (3), data with an unacceptable ACK (6): each answered with an ACK.
    assert c["tcp.challenge_acks"] + c.get("tcp.challenge_ack_limited", 0) >= 3, nonzero(c, "tcp.")
    assert c["tcp.bad_options"] >= 2, nonzero(c, "tcp.")
    assert c["tcp.conn_resets"] == 0, nonzero(c, "tcp.")
    check_pool(c)


FLOOD = r"""
import random, socket, struct, sys, time
iface, dmac, smac, dst, port, count = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
mac = lambda m: bytes(int(x, 16) for x in m.split(":"))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
rng = random.Random(5)
eth = mac(dmac) + mac(smac) + b"\x08\x00"
d = socket.inet_aton(dst)
t0 = time.monotonic()
for i in range(count):
    src = socket.inet_aton("198.18.0.%d" % rng.randint(3, 254))
    opts = b"\x02\x04\x05\xb4\x01\x03\x03\x07"
    h = struct.pack("!HHIIBBHHH", rng.randint(1024, 65535), port, rng.getrandbits(32), 0, 7 << 4, 0x02, 64240, 0, 0) + opts
    c = csum(src + d + struct.pack("!BBH", 0, 6, len(h)) + h)
    h = h[:16] + struct.pack("!H", c) + h[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(h), i & 0xffff, 0x4000, 64, 6, 0, src, d)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    s.send(eth + ip + h)
print("syns", count, "seconds", round(time.monotonic() - t0, 2), flush=True)
"""


def test_syn_flood_while_a_legitimate_client_is_served(testbed, tool):
    a, b = testbed.host("a"), testbed.host("b")
    # The SYN-ACKs to the spoofed sources go to a's MAC (whose kernel drops them: not its
    # address), so nothing leaves the testbed and the stack never waits on ARP.
    batch = "".join(f"neigh replace 198.18.0.{i} lladdr {a.mac} dev {b.ifname} nud permanent\n"
                    for i in range(3, 255))
    b.run(["ip", "-batch", "-"], input=batch, check=True, timeout=30)
    echo = Tool(b, tool, ["echo", "7"])
    flood = a.popen([PY, "-c", FLOOD, a.ifname, b.mac, a.mac, b.addr, str(echo.port), "30000"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)     # the SYN queue is full before the legitimate client comes
    r = a.run([PY, MANY, b.addr, str(echo.port), "--conns", "20", "--rounds", "3", "--max", "8192",
               "--timeout", "30"], timeout=200)
    fout, ferr = flood.communicate(timeout=120)
    c = echo.stop()
    print(f"\nSYN flood: {fout.strip()} {ferr[-500:]}; legitimate client: {r.stdout.strip()} {r.stderr[-500:]}")
    print(f"  stack tcp: {nonzero(c, 'tcp.')}")
    assert flood.returncode == 0, ferr
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    assert echo.rc == 0, echo.stderr[-2000:]
    # The flood reached the stack: most of its 30000 SYNs. A loaded machine drops some of the
    # burst before they get there (the veth's ring, the AF_XDP RX ring), as a wire would: 29819
    # arrived once, and this test is about serving the client meanwhile, not about counting.
    assert c["tcp.syn_in"] >= 27000, nonzero(c, "tcp.")
    assert c["tcp.syncookies_sent"] > 0, nonzero(c, "tcp.")
    assert c["echo.errors"] == 0 and c["echo.accepted"] >= 60, nonzero(c, "echo.")
