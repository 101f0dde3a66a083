// A git repository served over HTTP from a private network (test/support/netns.ts), for what
// machines clone: the environments test and bench:environments.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { privateNetwork } from './netns';

export const GIT_PORT = 8080;

export interface GitServer {
  /** The namespace's address; the repository is http://<address>:GIT_PORT/app.git. */
  address: string;
  /** The /30 to allow machines to reach (KISTE_MACHINE_EGRESS_ALLOW). */
  cidr: string;
  /** Request lines so far: `auth <url>` or `anon <url>`. */
  requests: () => string[];
  close(): void;
}

/**
 * A bare repository app.git (README "release one" at tag v1, "release two" on main) over git's dumb
 * HTTP protocol, with basic auth as user `kiste` and `password`, in a network namespace of its own.
 */
export function gitServer(password: string): GitServer {
  const dir = mkdtempSync(join(tmpdir(), 'kiste-git-'));
  const git = (...args: string[]) => execFileSync('git', args, { cwd: dir, stdio: 'pipe', env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@e', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@e' } });
  git('init', '-q', '-b', 'main', 'work');
  writeFileSync(join(dir, 'work', 'README'), 'release one\n');
  git('-C', 'work', 'add', 'README');
  git('-C', 'work', 'commit', '-q', '-m', 'one');
  git('-C', 'work', 'tag', 'v1');
  writeFileSync(join(dir, 'work', 'README'), 'release two\n');
  git('-C', 'work', 'commit', '-q', '-am', 'two');
  git('clone', '-q', '--bare', 'work', 'app.git');
  git('-C', 'app.git', 'update-server-info');
  const log = join(dir, 'requests.log');
  writeFileSync(log, '');
  const server = join(dir, 'server.js');
  writeFileSync(server, `
const http = require('http'), fs = require('fs'), path = require('path');
const root = ${JSON.stringify(dir)}, expected = 'Basic ' + Buffer.from('kiste:${password}').toString('base64');
http.createServer((req, res) => {
  const authorised = req.headers.authorization === expected;
  fs.appendFileSync(${JSON.stringify(log)}, (authorised ? 'auth ' : 'anon ') + req.url + '\\n');
  if (!authorised) { res.writeHead(401, { 'WWW-Authenticate': 'Basic realm="git"' }); return res.end(); }
  const file = path.join(root, decodeURIComponent(new URL(req.url, 'http://x').pathname));
  if (!file.startsWith(root + '/app.git/')) { res.writeHead(404); return res.end(); }
  fs.readFile(file, (error, data) => { if (error) { res.writeHead(404); return res.end(); } res.end(data); });
}).listen(${GIT_PORT}, '0.0.0.0');
`);
  const network = privateNetwork('git', 30);
  network.spawn([process.execPath, server]);
  return {
    address: network.address,
    cidr: network.cidr,
    requests: () => readFileSync(log, 'utf8').split('\n').filter(Boolean),
    close() {
      network.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
