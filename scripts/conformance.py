#!/usr/bin/env python3
"""TCP conformance: Google's packetdrill TCP scripts against the kernel and against slipstream,
in one run (make conformance).

packetdrill is not part of the project. PACKETDRILL_SRC names a checkout of it (the directory
that holds gtests/); without one, or without the tools to build it (bison, flex: make
conformance-deps), this prints why and exits 0 without running anything.

How it runs (packetdrill's remote "wire" mode):
  - a testbed of two namespaces <prefix>pd<pid>-c (the host under test) and -s (the wire server)
    with two veth links: veth0 carries the test traffic, veth1 packetdrill's control connection;
  - for every script and each of the two stacks, a fresh `packetdrill --wire_server` in -s
    injects the script's packets on its veth0 and sniffs ours; `packetdrill --wire_client` in -c
    makes the script's system calls: directly (kernel), or under `slipstream run --iface veth0`
    (its control connection goes to the other link, which the stack does not serve, so it stays
    a kernel socket);
  - the scripts' 192.168/192.0.2 addresses are remapped with packetdrill's options: we are
    198.18.0.1, the gateway (the wire server) 198.18.0.2, the remote peer 198.19.0.1/24.
  - the scripts ask for CUBIC (their defaults.sh); where the machine's
    net.ipv4.tcp_allowed_congestion_control lacks cubic, a namespace cannot choose it, so the run
    adds it to that list and puts the list back at the end (allow_cubic).

A script slipstream fails only because our SYN offers another window scale than Linux's 8 is run
once more with our value in its expected SYNs (a legitimate choice, see docs/COMPLIANCE.md): both
counts are printed.

Output in <build>/conformance/: results.tsv (script, kernel, slipstream, slipstream with the
window scale normalised: pass / fail / timeout), logs/<stack>/<script>.log (packetdrill's output), summary.txt; the last line printed
is "conformance: kernel K/N passed, slipstream S/N passed".

Environment: PACKETDRILL_SRC (required), SLIP_BUILD (default build), SLIP_NS_PREFIX (default
"slc"), CONFORMANCE_FILTER (substrings, comma-separated, one of which a script's path must
contain), CONFORMANCE_TIMEOUT (seconds per script and stack, default 40),
CONFORMANCE_TOLERANCE_US (packetdrill's timing tolerance, default 10000: both stacks run on a
shared, loaded machine), CONFORMANCE_JOBS (scripts run at once, each pair in its own namespaces,
default 3: most of a script's time is waiting).
"""

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "system"))

LOCAL_IP = "198.18.0.1"
GATEWAY_IP = "198.18.0.2"
REMOTE_IP = "198.19.0.1/24"
CONTROL_SERVER_IP = "198.18.1.2"
WIRE_PORT = "8081"
# What packetdrill's own run_all.py defines for IPv4 runs (the fast open cookie it gives is for
# its default addresses: with ours the fastopen scripts' cookies differ, for both stacks).
DEFINES = ["-D", "TFO_COOKIE=3021b9d889017eeb", "-D", "CODE=host_unreachable",
           "-D", "CMSG_LEVEL_IP=SOL_IP", "-D", "CMSG_TYPE_RECVERR=IP_RECVERR"]


def skip(reason):
    print(f"conformance: skipped: {reason}")
    sys.exit(0)


def build_packetdrill(src, out):
    """Builds packetdrill from the checkout into out/ (a copy: the checkout is left untouched)."""
    pd_src = os.path.join(src, "gtests", "net", "packetdrill")
    binary = os.path.join(out, "packetdrill")
    if os.path.exists(binary):
        return binary
    for tool in ("bison", "flex", "make", "cc"):
        if not shutil.which(tool):
            skip(f"{tool} is not installed (make conformance-deps installs what packetdrill needs)")
    if os.path.isdir(out):
        shutil.rmtree(out)
    shutil.copytree(pd_src, out)
    r = subprocess.run(["make", "-f", "Makefile.Linux", "packetdrill"], cwd=out,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0 or not os.path.exists(binary):
        print(r.stdout[-3000:])
        print("conformance: error: packetdrill did not build")
        sys.exit(1)
    return binary


def copy_scripts(src, out):
    """A copy of the scripts (gtests/net: tcp/ and the common/ some of them use) whose
    defaults.sh files name our device: they end by giving tun0 (the device of packetdrill's local
    mode) a pfifo qdisc, which fails in wire mode and with it every script's init command. Under
    slipstream the device's root qdisc cannot be changed (and does not matter: the stack sends
    through AF_XDP): that failure is ignored."""
    net = os.path.join(out, "net")
    if os.path.isdir(net):
        shutil.rmtree(net)
    os.makedirs(net)
    for d in ("tcp", "common"):
        if os.path.isdir(os.path.join(src, "gtests", "net", d)):
            shutil.copytree(os.path.join(src, "gtests", "net", d), os.path.join(net, d))
    for d in (os.path.join(net, "common", "defaults.sh"), os.path.join(net, "tcp", "common", "defaults.sh")):
        if not os.path.exists(d):
            continue
        with open(d) as f:
            text = f.read()
        with open(d, "w") as f:
            f.write(text.replace("tc qdisc add dev tun0 root pfifo",
                                 "tc qdisc add dev veth0 root pfifo 2>/dev/null || true"))
    return os.path.join(net, "tcp")


def find_scripts(base, filt):
    found = []
    for d, _, files in os.walk(base):
        for f in files:
            if f.endswith(".pkt"):
                rel = os.path.relpath(os.path.join(d, f), base)
                if not filt or any(f and f in rel for f in filt.split(",")):
                    found.append(rel)
    return base, sorted(found)


def wait_listening(host, port, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = host.run(["ss", "-Htln", f"sport = :{port}"], timeout=5)
        if r.stdout.strip():
            return True
        time.sleep(0.05)
    return False


def run_one(tb, pd, base, rel, stack, build, logdir, timeout, tol):
    c, s = tb.host("c"), tb.host("s")
    log = os.path.join(logdir, stack, rel.replace("/", "__") + ".log")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    server = s.popen([pd, "--wire_server", "--wire_server_dev=veth0", f"--wire_server_port={WIRE_PORT}"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_listening(s, WIRE_PORT):
            with open(log, "w") as f:
                f.write("wire server did not listen\n")
            return "error"
        cmd = [pd, "--wire_client", "--wire_client_dev=veth0", f"--wire_server_ip={CONTROL_SERVER_IP}",
               f"--wire_server_port={WIRE_PORT}", f"--local_ip={LOCAL_IP}", f"--gateway_ip={GATEWAY_IP}",
               f"--remote_ip={REMOTE_IP}", "--netmask_ip=255.255.255.0", f"--tolerance_usecs={tol}",
               "--send_omit_free", *DEFINES, os.path.basename(rel)]
        if stack == "slipstream":
            cmd = [os.path.join(build, "slipstream"), "run", "--iface", "veth0", "--", *cmd]
        # defaults.sh (run by the script, after our program started) asks for CUBIC; the stack
        # reads the namespace's TCP sysctls when it starts and then at most once a second at a
        # connect or listen (docs/CONFIG.md), and packetdrill's own control connection is its
        # first connect: the namespace starts each script with CUBIC already, for both stacks.
        c.run(["sysctl", "-qw", "net.ipv4.tcp_congestion_control=cubic"], timeout=10)
        # The scripts name their helpers relative to their own directory (../common/defaults.sh).
        cwd = os.path.join(base, os.path.dirname(rel))
        argv = tb.host("c").wrap(["sh", "-c", 'cd "$0" && exec "$@"', cwd, *cmd])
        env = dict(os.environ, SLIP_EXIT_LINGER_MS="0")
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             text=True, errors="replace", start_new_session=True, env=env)
        try:
            out, _ = p.communicate(timeout=timeout)
            verdict = "pass" if p.returncode == 0 else "fail"
        except subprocess.TimeoutExpired:
            # The client and whatever it started are in their own process group.
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            verdict = "timeout"
        with open(log, "w") as f:
            f.write(" ".join(cmd) + "\n" + out)
        return verdict
    finally:
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.wait()
        # A script may leave sockets in TIME_WAIT or half-open; the next one uses the same ports.
        c.run(["ss", "-K"], timeout=5)


WSCALE_DIFF = re.compile(r"expected: wscale 8 actual: wscale (\d+)")


def normalised_copy(base, rel, log):
    """The script with our window scale in place of Linux's in the SYNs we send, when the log
    shows that this was the first difference (Linux offers 8 from its 15 MiB tcp_rmem maximum;
    we derive ours from the receive buffer, RFC 7323 §2.2 leaves the choice to the receiver).
    None when the script failed for another reason."""
    with open(log, errors="replace") as f:
        m = WSCALE_DIFF.search(f.read())
    if not m:
        return None
    with open(os.path.join(base, rel)) as f:
        lines = f.read().split("\n")
    out = [re.sub(r"wscale 8\b", f"wscale {m.group(1)}", l) if re.search(r">\s+S", l) else l for l in lines]
    norm = rel[:-len(".pkt")] + ".norm-wscale.pkt"
    with open(os.path.join(base, norm), "w") as f:
        f.write("\n".join(out))
    return norm


def first_error(logdir, rel):
    """The line where packetdrill gave up on slipstream's run (the normalised one when it ran)."""
    base = rel.replace("/", "__")
    for name in (base[:-4] + ".norm-wscale.pkt.log", base + ".log"):
        path = os.path.join(logdir, "slipstream", name)
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                lines = [l.strip() for l in f.read().splitlines()[1:]]
            for l in lines:
                if re.search(r"error|assert|Expected|timing|Timed out", l) and "tcp_congestion_control" not in l:
                    return l[:200]
            return (lines[-1] if lines else "(no output)")[:200]
    return ""


ALLOWED_CC = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"


def allow_cubic():
    """The scripts' defaults.sh sets net.ipv4.tcp_congestion_control=cubic. Outside the first
    network namespace Linux lets only tcp_allowed_congestion_control's algorithms be the default
    (EPERM otherwise). On a machine whose list lacks cubic (this test machine: reno bbr) the
    kernel stayed on the namespace's inherited default, BBR, under scripts written for CUBIC, and
    the stack, which now follows the sysctl as the kernel does, would too. cubic is added to that
    machine-wide list for the run and the list put back after it. Returns the list before (None:
    left as it was)."""
    try:
        with open(ALLOWED_CC) as f:
            before = f.read().strip()
    except OSError:
        return None
    if "cubic" in before.split():
        return None
    try:
        with open(ALLOWED_CC, "w") as f:
            f.write(before + " cubic")
    except OSError as e:
        print(f"conformance: warning: cannot add cubic to {ALLOWED_CC} ({e}): the scripts will run "
              f"under the namespace's default algorithm", flush=True)
        return None
    print(f"conformance: {ALLOWED_CC} is '{before} cubic' for this run ('{before}' after it)", flush=True)
    return before


def restore_allowed(before):
    if before is not None:
        with open(ALLOWED_CC, "w") as f:
            f.write(before)


def main():
    src = os.environ.get("PACKETDRILL_SRC", "")
    if not src:
        skip("PACKETDRILL_SRC is not set: point it at a checkout of google/packetdrill")
    if not os.path.isdir(os.path.join(src, "gtests", "net", "tcp")):
        skip(f"PACKETDRILL_SRC={src} has no gtests/net/tcp")
    if os.geteuid() != 0:
        skip("needs root (network namespaces)")
    build = os.path.abspath(os.environ.get("SLIP_BUILD", os.path.join(ROOT, "build")))
    if not os.path.exists(os.path.join(build, "slipstream")):
        skip(f"{build}/slipstream is not built")
    outdir = os.path.join(build, "conformance")
    os.makedirs(outdir, exist_ok=True)
    pd = build_packetdrill(src, os.path.join(outdir, "packetdrill-build"))
    base, scripts = find_scripts(copy_scripts(src, outdir), os.environ.get("CONFORMANCE_FILTER", ""))
    if not scripts:
        skip("no script matches CONFORMANCE_FILTER")
    timeout = float(os.environ.get("CONFORMANCE_TIMEOUT", "40"))
    tol = int(os.environ.get("CONFORMANCE_TOLERANCE_US", "10000"))
    logdir = os.path.join(outdir, "logs")
    if os.path.isdir(logdir):
        shutil.rmtree(logdir)

    from testbed import Testbed, Topology
    allowed_before = allow_cubic()
    prefix = os.environ.get("SLIP_NS_PREFIX", "slc") + "pd"
    jobs = max(1, int(os.environ.get("CONFORMANCE_JOBS", "3")))
    todo = queue.Queue()
    for n, rel in enumerate(scripts, 1):
        todo.put((n, rel))
    done = {}
    lock = threading.Lock()

    def worker():
        # Each worker has its own pair of namespaces: scripts use the same addresses and ports.
        tb = Testbed(Topology(hosts=("c", "s"), links=[("c", "s"), ("c", "s")]), prefix=prefix)
        try:
            tb.up()
            # The scripts expect segments of at most one MSS from the kernel as from a wire:
            # segmentation offload on the veth would hand the sniffer 64 KB frames.
            tb.host("c").run(["ethtool", "-K", "veth0", "tso", "off", "gso", "off"], timeout=10)
            while True:
                try:
                    n, rel = todo.get_nowait()
                except queue.Empty:
                    return
                row = [run_one(tb, pd, base, rel, stack, build, logdir, timeout, tol)
                       for stack in ("kernel", "slipstream")]
                # Again with our window scale in the expected SYNs, when that alone stopped it.
                norm = row[1]
                if row[1] == "fail":
                    log = os.path.join(logdir, "slipstream", rel.replace("/", "__") + ".log")
                    nrel = normalised_copy(base, rel, log)
                    if nrel:
                        norm = run_one(tb, pd, base, nrel, "slipstream", build, logdir, timeout, tol)
                row.append(norm)
                with lock:
                    done[rel] = row
                    print(f"[{len(done)}/{len(scripts)}] {rel}: kernel {row[0]}, slipstream {row[1]}, "
                          f"normalised {row[2]}", flush=True)
        finally:
            tb.down()

    # SIGTERM ends the run like Ctrl-C: the testbeds' atexit hook takes the namespaces down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(jobs)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    finally:
        restore_allowed(allowed_before)
    results = [(rel, *done[rel]) for rel in scripts if rel in done]
    counts = {k: sum(r[i] == "pass" for r in results) for i, k in
              ((1, "kernel"), (2, "slipstream"), (3, "normalised"))}
    with open(os.path.join(outdir, "results.tsv"), "w") as res:
        res.write("script\tkernel\tslipstream\tslipstream_wscale_normalised\n")
        for r in results:
            res.write("\t".join(r) + "\n")
    n = len(results)
    line = (f"conformance: kernel {counts['kernel']}/{n} passed, slipstream {counts['slipstream']}/{n} passed "
            f"({counts['normalised']}/{n} with our window scale in the expected SYNs)")
    with open(os.path.join(outdir, "summary.txt"), "w") as f:
        f.write(line + "\n")
        for rel, k, s, norm in results:
            if s != "pass":
                f.write(f"{rel}\tkernel {k}\tslipstream {s}/{norm}\t{first_error(logdir, rel)}\n")
    print(f"conformance: results in {outdir}/results.tsv, logs in {logdir}")
    print(line)


if __name__ == "__main__":
    main()
