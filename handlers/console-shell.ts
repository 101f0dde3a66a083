// Every console address answers the same app shell (the browser draws the page), with the console's
// security headers. The policy allows scripts and connections from this origin only; styles may be
// inline because the terminal (xterm.js) writes its own style element.
import type { Services } from '../src/services';

export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "object-src 'none'",
].join('; ');

export async function consoleShell(services: Services): Promise<{ status: 200; body: string; headers: Record<string, string> }> {
  const shell = await services.builtFiles.consoleShell();
  return {
    status: 200,
    body: shell.body,
    headers: {
      'content-type': shell.contentType,
      'cache-control': 'no-cache',
      'content-security-policy': CONSOLE_CSP,
      'x-frame-options': 'DENY',
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'same-origin',
    },
  };
}
