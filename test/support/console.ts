// The web console as a person uses it: a listening test service (HTTP and WebSockets) and real
// Chromium. Pages are watched for errors; `signIn` goes through the sign-in form.
import { createServer, Server } from 'node:http';
import type { Browser, Page } from 'playwright-core';
import { serveWebSockets } from '../../src/http/websocket';
import type { Account } from '../../src/store/accounts';
import { launchChromium, watchedPage, WatchedPage } from './browser';
import { startTestService, TEST_PASSWORD, TestService, TestServiceOptions } from './harness';
import { freePort } from './service-process';

export interface ConsoleRig {
  t: TestService;
  url: string;
  browser: Browser;
  /** A fresh browser profile on the console, watched for errors. */
  open(path?: string): Promise<WatchedPage>;
  close(): Promise<void>;
}

/** `envAt`: settings that name the console's own address (chosen here, before the service starts). */
export async function startConsole(options: TestServiceOptions & { envAt?: (url: string) => NodeJS.ProcessEnv } = {}): Promise<ConsoleRig> {
  const browser = await launchChromium();
  // The service's base URL is the address it is reached at (desktop links and other absolute URLs
  // name it), so the port is chosen before the service starts.
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const t = await startTestService({ ...options, env: { KISTE_BASE_URL: url, ...options.env, ...options.envAt?.(url) } });
  const server: Server = createServer(t.app);
  const sockets = serveWebSockets(server, t.app);
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const pages: WatchedPage[] = [];
  return {
    t,
    url,
    browser,
    async open(path = '/') {
      const watched = await watchedPage(browser);
      pages.push(watched);
      await watched.page.goto(url + path);
      return watched;
    },
    async close() {
      for (const { context } of pages) await context.close().catch(() => undefined);
      await browser.close();
      sockets.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await t.close();
    },
  };
}

/** Signs in through the form on the sign-in page the browser is on. */
export async function signIn(page: Page, account: Account, password = TEST_PASSWORD): Promise<void> {
  await page.getByLabel('E-mail').fill(account.email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}
