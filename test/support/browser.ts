// Real Chromium for the browser tests (Debian package `chromium`, or KISTE_CHROMIUM=/path/to/chrome)
// through playwright-core. Without it the tests fail, they are not skipped. Pages record uncaught
// errors, console errors and CSP refusals, so a test can require a clean run.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Browser, BrowserContext, chromium, Page } from 'playwright-core';
import { packageRoot } from '../../src/db/migrate';

const CHROMIUM = process.env.KISTE_CHROMIUM ?? '/usr/bin/chromium';

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`Chromium not found at ${CHROMIUM}: install the Debian package \`chromium\` or set KISTE_CHROMIUM to a Chromium/Chrome binary`);
  }
  try {
    // As root Chromium refuses to start with its sandbox.
    return await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
    });
  } catch (error) {
    throw new Error(`Chromium at ${CHROMIUM} did not start: ${error instanceof Error ? error.message : String(error)}`);
  }
}

export interface WatchedPage {
  page: Page;
  context: BrowserContext;
  /**
   * Uncaught exceptions and console errors (CSP refusals among them) seen so far. Chromium also logs
   * every 4xx answer as a console error; those are the API's refusals, which the console shows
   * itself (e.g. 401 while signed out), so they are left out. 5xx answers count.
   */
  problems: string[];
}

/** A page in a fresh profile (no cookies), watched for errors. */
export async function watchedPage(browser: Browser, options: { viewport?: { width: number; height: number } } = {}): Promise<WatchedPage> {
  const context = await browser.newContext({ viewport: options.viewport ?? { width: 1280, height: 860 } });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && !/^Failed to load resource: the server responded with a status of 4\d\d/.test(message.text())) {
      // The address says which answer it was (a failed resource's text does not).
      const at = message.location().url;
      problems.push(`console error: ${message.text()}${at ? ` (${at.replace(/#.*$/, '')})` : ''}`);
    }
  });
  return { page, context, problems };
}

/**
 * Where screenshots go: KISTE_SCREENSHOT_DIR, or test-screenshots/ in the package (ignored by git).
 * Returns the file's path.
 */
export async function screenshot(page: Page, name: string): Promise<string> {
  const dir = process.env.KISTE_SCREENSHOT_DIR ?? join(packageRoot(), 'test-screenshots');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}
