// A Node HTTP server with the default listen call (test_dualstack.py): server.listen(port) opens
// a dual-stack AF_INET6 socket on [::]. Serves the files of a folder: node node_http.js DIR PORT.
'use strict';
const http = require('http');
const fs = require('fs');
const path = require('path');
const [dir, port] = process.argv.slice(2);
const server = http.createServer((req, res) => {
  const f = path.join(dir, path.basename(req.url));
  fs.stat(f, (err, st) => {
    if (err) { res.writeHead(404); res.end(); return; }
    res.writeHead(200, { 'Content-Length': st.size, 'Content-Type': 'application/octet-stream' });
    fs.createReadStream(f).pipe(res);
  });
});
server.listen(Number(port), () => {
  const a = server.address();
  console.log(`listening ${a.family} ${a.address} ${a.port}`);
});
