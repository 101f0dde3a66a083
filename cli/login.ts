// `kiste login`: OAuth 2.0 Authorization Code + PKCE (S256) with a loopback redirect. The CLI listens
// on 127.0.0.1 (a free port), opens the browser at the service's /oauth/authorize (or prints the URL
// when it cannot), waits for the redirect with the code, checks `state`, exchanges the code with its
// verifier and keeps the token in the config file (0600). `kiste logout` revokes it and forgets it.
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { hostname } from 'node:os';
import { apiFor, CliError, ok } from './api';
import { readConfig, writeConfig, type CliContext } from './context';

export const CLI_CLIENT_ID = 'kiste-cli';
const LOGIN_TIMEOUT_MS = 10 * 60 * 1000;

export async function runLogin(ctx: CliContext, options: { browser: boolean }): Promise<{ email: string }> {
  const verifier = randomBytes(48).toString('base64url');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const state = randomBytes(16).toString('base64url');
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as { port: number }).port;
  const redirectUri = `http://127.0.0.1:${port}/callback`;
  const authorize = new URL('/oauth/authorize', ctx.url);
  for (const [name, value] of Object.entries({
    response_type: 'code', client_id: CLI_CLIENT_ID, redirect_uri: redirectUri, code_challenge: challenge,
    code_challenge_method: 'S256', state, device: hostname().slice(0, 100),
  })) authorize.searchParams.set(name, value);

  try {
    const code = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new CliError('no answer from the browser within 10 minutes', { hint: 'Run `kiste login` again.' })), LOGIN_TIMEOUT_MS);
      timer.unref();
      server.on('request', (req, res) => {
        const url = new URL(req.url ?? '/', redirectUri);
        if (url.pathname !== '/callback') {
          res.writeHead(404).end();
          return;
        }
        const done = (status: number, text: string) => res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' }).end(`${text}\n`);
        if (url.searchParams.get('state') !== state) {
          done(400, 'This sign-in answer does not belong to the kiste login that is waiting.');
          return; // a stray or forged request: keep waiting for the real one
        }
        clearTimeout(timer);
        const error = url.searchParams.get('error');
        const code = url.searchParams.get('code');
        if (error || !code) {
          done(400, 'Sign-in was not approved. You can close this tab.');
          reject(error === 'access_denied'
            ? new CliError('sign-in was denied in the browser (access_denied)', { hint: 'Nothing was saved. Run `kiste login` again and choose Approve to sign in.' })
            : new CliError(`sign-in was not approved (${error ?? 'no code'})`, { hint: 'Run `kiste login` again.' }));
          return;
        }
        done(200, 'kiste: signed in. You can close this tab and go back to the terminal.');
        resolve(code);
      });
      process.stderr.write(`Open this address in a browser to sign in to ${ctx.url}:\n\n  ${authorize.toString()}\n\n`);
      if (options.browser) openBrowser(authorize.toString());
    });
    const token = ok(await apiFor({ ...ctx, token: null }).POST('/oauth/token', {
      body: { grant_type: 'authorization_code', client_id: CLI_CLIENT_ID, code, code_verifier: verifier, redirect_uri: redirectUri },
    }));
    writeConfig({ ...readConfig(ctx.configDir), url: ctx.url, token: token.access_token }, ctx.configDir);
    const me = ok(await apiFor({ ...ctx, token: token.access_token }).GET('/v1/me'));
    return { email: me.email };
  } finally {
    server.close();
  }
}

/** Revokes the stored sign-in (or the --token given) and removes it from the config file. */
export async function runLogout(ctx: CliContext): Promise<void> {
  if (ctx.token) {
    const result = await apiFor(ctx).POST('/v1/auth/logout');
    // Already revoked or expired: forgetting it is all that is left to do.
    if (result.error && result.response.status !== 401) ok(result);
  }
  const config = readConfig(ctx.configDir);
  if (config.token !== undefined && (config.token === ctx.token || !ctx.token)) {
    delete config.token;
    writeConfig(config, ctx.configDir);
  }
}

/** Best effort: the URL is printed anyway (no browser on a server, over SSH, in CI). */
function openBrowser(url: string): void {
  const [command, args] = process.platform === 'darwin' ? ['open', [url]] : process.platform === 'win32' ? ['cmd', ['/c', 'start', '', url]] : ['xdg-open', [url]];
  try {
    const child = spawn(command, args, { stdio: 'ignore', detached: true });
    child.on('error', () => undefined);
    child.unref();
  } catch {
    // printed above
  }
}
