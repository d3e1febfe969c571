"""MariaDB server (Debian's mariadb-server) under `slipstream run` (issue 12): it used to abort at
start ("Can't initialize timers": its 16-256 KiB thread stacks). A kernel client in host a
creates a table, inserts 2,000 rows (some of 20 KB) and reads them back; the kernel of host b
saw (almost) none of the segments."""
import os
import time

import pytest

from test_apps import B_ADDR, Proof, assert_accelerated_log, need, read, slip, start, stop, wait_listening, \
    workdir  # noqa: F401

PORT = 3306


def mysqld():
    for name in ("mariadbd", "mysqld"):
        for d in ("/usr/sbin", "/usr/bin"):
            if os.path.exists(os.path.join(d, name)):
                return os.path.join(d, name)
    pytest.skip("mariadb-server is not installed (scripts/deps.sh installs it)")


def test_mariadb_create_insert_select(testbed, slip, workdir):
    server = mysqld()
    need("mariadb-install-db", "mariadb")
    a, b = testbed.host("a"), testbed.host("b")
    data = os.path.join(workdir, "data")
    t0 = time.monotonic()
    r = b.run(["mariadb-install-db", "--no-defaults", "--user=root", f"--datadir={data}",
               "--auth-root-authentication-method=normal", "--skip-test-db",
               # without these it looks up the hostname first, and fails where neither it nor localhost
               # resolves (CI's clean root has no /etc/hosts entry for the machine's name)
               "--force", "--skip-name-resolve"], timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    print(f"mariadb-install-db: {time.monotonic() - t0:.1f} s")
    log = os.path.join(workdir, "mariadb.log")
    cmd = [server, "--no-defaults", "--user=root", f"--datadir={data}", f"--socket={workdir}/sock",
           f"--pid-file={workdir}/pid", f"--bind-address={B_ADDR}", f"--port={PORT}", "--skip-grant-tables",
           "--skip-name-resolve", "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M",
           "--innodb-flush-log-at-trx-commit=0", "--skip-log-bin"]
    p = start(b, slip(cmd), log)
    try:
        wait_listening(b, PORT, proc=p, log=log, timeout=60)
        print(f"server listening after {time.monotonic() - t0:.1f} s")
        proof = Proof(b).start(peer=a)
        sql = ["CREATE DATABASE t;", "CREATE TABLE t.k (id INT PRIMARY KEY, v MEDIUMTEXT);"]
        # 20 statements of 100 rows: one commit each (a commit per row spent most of a minute in fsync)
        sql += ["INSERT INTO t.k VALUES " + ",".join(
            f"({i}, REPEAT('{chr(97 + i % 26)}', {20000 if i % 100 == 0 else 50}))" for i in range(j, j + 100)) + ";"
            for j in range(0, 2000, 100)]
        sql += ["SELECT COUNT(*), SUM(LENGTH(v)), SUM(CRC32(v)) FROM t.k;"]
        r = a.run(["mariadb", "-h", B_ADDR, "-P", str(PORT), "-u", "root", "-N", "-B"], input="\n".join(sql),
                  timeout=120)
        proof.note_xdp()
        assert r.returncode == 0, (r.stderr, read(log)[-2000:])
        count, total, _ = r.stdout.split()
        print("mariadb:", r.stdout.strip())
        assert int(count) == 2000 and int(total) == 20 * 20000 + 1980 * 50
        r2 = a.run(["mariadb", "-h", B_ADDR, "-P", str(PORT), "-u", "root", "-N", "-B", "-e",
                    "SELECT v FROM t.k WHERE id = 1900"], timeout=60)
        assert r2.stdout.strip() == chr(97 + 1900 % 26) * 20000
        proof.check()
        assert_accelerated_log(read(log))
    finally:
        stop(p, timeout=30)
        print("mariadb log (tail):", read(log)[-1500:])
