"""Node.js (Debian's nodejs) as an HTTP server under `slipstream run` (issue 12): a 2 MB body,
sha256 checked, over keep-alive and new connections from a kernel curl, and the kernel of the
server's host saw (almost) none of the segments. The server listens on 0.0.0.0; Node's default
`listen(port)` is the dual-stack [::], which is IPv6 work (issue 16)."""
import hashlib
import os
import subprocess

import pytest

from test_apps import B_ADDR, Proof, assert_accelerated_log, curl_argv, need, parse_curl, read, sha256, slip, \
    start, stop, wait_listening, workdir  # noqa: F401

SERVER = r'''
const http = require('http');
const crypto = require('crypto');
const body = crypto.createHash('sha512').update('seed').digest();
const big = Buffer.alloc(2 * 1024 * 1024);
for (let i = 0; i < big.length; i += body.length) body.copy(big, i);
http.createServer((req, res) => {
  res.writeHead(200, {'Content-Type': 'application/octet-stream', 'Content-Length': big.length});
  res.end(big);
}).listen(8090, '0.0.0.0', () => console.log('listening'));
'''


def expected():
    body = hashlib.sha512(b"seed").digest()
    big = (body * (2 * 1024 * 1024 // len(body) + 1))[:2 * 1024 * 1024]
    return hashlib.sha256(big).hexdigest()


def test_node_http_server(testbed, slip, workdir):
    need("node", "curl")
    a, b = testbed.host("a"), testbed.host("b")
    js = os.path.join(workdir, "server.js")
    with open(js, "w") as f:
        f.write(SERVER)
    log = os.path.join(workdir, "node.log")
    p = start(b, slip(["node", js]), log)
    try:
        wait_listening(b, 8090, proc=p, log=log)
        proof = Proof(b).start(peer=a)
        url = f"http://{B_ADDR}:8090/"
        outs = [os.path.join(workdir, f"o{i}") for i in range(3)]
        r = a.run(curl_argv([url] * 3, outs), timeout=60)         # one keep-alive connection
        r2 = a.run(curl_argv([url], [os.path.join(workdir, "o3")]), timeout=60)   # and a new one
        proof.note_xdp()
        rows = parse_curl(r.stdout) + parse_curl(r2.stdout)
        print("curl:", rows)
        assert r.returncode == 0 and r2.returncode == 0, (r.stderr, r2.stderr, read(log))
        assert [x["code"] for x in rows] == [200] * 4, rows
        want = expected()
        for o in outs + [os.path.join(workdir, "o3")]:
            assert sha256(o) == want
        proof.check()
        assert_accelerated_log(read(log))
    finally:
        stop(p)
        print("node log:", read(log)[-1500:])
