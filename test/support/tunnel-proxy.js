// An OpenSSH ProxyCommand for the tests: stdin/stdout carried over the SSH tunnel WebSocket.
//   node tunnel-proxy.js <ws-url> <bearer-token>
// Exits 0 when the tunnel closes normally; 2 with the HTTP error on stderr when it is refused.
const WebSocket = require('ws');

const [url, token] = process.argv.slice(2);
const ws = new WebSocket(url, { headers: { authorization: `Bearer ${token}` }, perMessageDeflate: false });
ws.on('unexpected-response', (req, res) => {
  let body = '';
  res.on('data', (c) => (body += c));
  res.on('end', () => {
    process.stderr.write(`tunnel refused: ${res.statusCode} ${body}\n`);
    process.exit(2);
  });
});
ws.on('open', () => {
  process.stdin.on('data', (chunk) => {
    ws.send(chunk, { binary: true });
    if (ws.bufferedAmount > 1 << 20) {
      process.stdin.pause();
      const wait = setInterval(() => {
        if (ws.bufferedAmount < 1 << 19) {
          clearInterval(wait);
          process.stdin.resume();
        }
      }, 5);
    }
  });
  process.stdin.on('end', () => ws.close(1000));
});
ws.on('message', (data) => {
  if (!process.stdout.write(data)) {
    ws.pause();
    process.stdout.once('drain', () => ws.resume());
  }
});
ws.on('close', (code, reason) => {
  if (code !== 1000 && code !== 1005) process.stderr.write(`tunnel closed: ${code} ${reason}\n`);
  process.exit(0);
});
ws.on('error', (error) => {
  process.stderr.write(`tunnel error: ${error.message}\n`);
  process.exit(1);
});
