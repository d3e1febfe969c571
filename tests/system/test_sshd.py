"""OpenSSH's sshd under `slipstream run` with its default seccomp sandbox (issue 12).

sshd re-executes itself for each connection and forks a pre-authentication child that chroots,
drops to user sshd, sets RLIMIT_NOFILE to 1 and installs a seccomp filter that kills the process
on any call outside a short list (no sendto, recvfrom, socket, clone). That child carries the
connection, so the library must keep the stack going there with the calls the filter allows
(src/preload/sandbox.c). A kernel ssh client in host a logs in with a key, runs a command and
copies a file both ways with scp (sftp protocol); the kernel of host b must have seen (almost)
none of the segments, and no process may be left in host b afterwards (a sandboxed child killed
by its filter used to stay a zombie whose progress thread kept the AF_XDP queue)."""
import hashlib
import os
import subprocess
import time

import pytest

from test_apps import B_ADDR, Proof, need, read, slip, start, stop, wait_listening, workdir  # noqa: F401

SSHD = "/usr/sbin/sshd"
PORT = 2222


def sshd_config(wd):
    conf = os.path.join(wd, "sshd_config")
    with open(conf, "w") as f:
        f.write(f"""Port {PORT}
ListenAddress {B_ADDR}
HostKey {wd}/host_key
AuthorizedKeysFile {wd}/authorized_keys
PidFile {wd}/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
Subsystem sftp internal-sftp
LogLevel VERBOSE
""")
    return conf


def keys(wd):
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(wd, name)],
                       check=True, timeout=30)
    os.rename(os.path.join(wd, "client_key.pub"), os.path.join(wd, "authorized_keys"))


def ssh_opts(wd):
    return ["-i", os.path.join(wd, "client_key"), "-o", "StrictHostKeyChecking=no", "-o",
            "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20",
            "-o", "LogLevel=ERROR"]


def test_sshd_sandboxed_login_command_and_scp(testbed, slip, workdir):
    need(SSHD, "ssh", "scp", "ssh-keygen")
    if not os.path.isdir("/run/sshd"):
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)   # sshd's privilege-separation chroot
    a, b = testbed.host("a"), testbed.host("b")
    wd = workdir
    keys(wd)
    conf = sshd_config(wd)
    r = subprocess.run([SSHD, "-t", "-f", conf], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    log = os.path.join(wd, "sshd.log")
    # -D: in the foreground, -e: log to stderr. The sandbox is the default (seccomp on Debian).
    p = start(b, slip([SSHD, "-D", "-e", "-f", conf]), log)
    wait_listening(b, PORT, proc=p, log=log)
    payload = os.urandom(3_000_000)
    src = os.path.join(wd, "payload")
    with open(src, "wb") as f:
        f.write(payload)
    want = hashlib.sha256(payload).hexdigest()
    target = f"root@{B_ADDR}"
    try:
        proof = Proof(b).start(peer=a)
        r = a.run(["ssh", *ssh_opts(wd), "-p", str(PORT), target, "echo hello-from-$(hostname -s) && id -u"],
                  timeout=60)
        print("ssh:", r.returncode, r.stdout.strip(), r.stderr.strip()[-500:])
        assert r.returncode == 0 and r.stdout.split()[0].startswith("hello-from-") and r.stdout.split()[1] == "0", \
            (r.stdout, r.stderr, read(log)[-3000:])
        # scp uses the sftp protocol (OpenSSH 9): up to b, then back down to a.
        r = a.run(["scp", *ssh_opts(wd), "-P", str(PORT), src, f"{target}:{wd}/uploaded"], timeout=60)
        assert r.returncode == 0, (r.stderr, read(log)[-3000:])
        back = os.path.join(wd, "downloaded")
        r = a.run(["scp", *ssh_opts(wd), "-P", str(PORT), f"{target}:{wd}/uploaded", back], timeout=60)
        assert r.returncode == 0, (r.stderr, read(log)[-3000:])
        proof.note_xdp()
        assert hashlib.sha256(open(os.path.join(wd, "uploaded"), "rb").read()).hexdigest() == want
        assert hashlib.sha256(open(back, "rb").read()).hexdigest() == want
        proof.check()
        text = read(log)
        assert "not accelerated" not in text and "did not answer" not in text, text[-3000:]
        assert "Accepted publickey" in text, text[-3000:]
    finally:
        rc = stop(p)
        print("sshd log (tail):", read(log)[-2500:])
    print("sshd exit code:", rc)
    # Nothing of sshd may stay behind holding the interface's queue.
    deadline = time.monotonic() + 5
    while b.pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = b.pids()
    assert not left, "processes left in host b: " + "; ".join(
        f"{pid}: {read(f'/proc/{pid}/cmdline').replace(chr(0), ' ')} ({read(f'/proc/{pid}/stat').split()[2:3]})"
        for pid in left)
