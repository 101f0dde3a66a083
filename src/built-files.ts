// What `npm run build` makes for the service to hand out as it is: the web console (dist/console: an
// app shell and content-hashed assets) and the one-file CLI (dist/downloads/kiste.js). Read on every
// request (small files, in the page cache) so a rebuild while the service runs is served at once; a
// missing build answers 503 P12 instead of a stack trace. All of them are text.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { KisteError } from './errors';

export interface BuiltFile {
  body: string;
  contentType: string;
}

export interface BuiltFiles {
  /** The console's index.html, served at every console address. */
  consoleShell(): Promise<BuiltFile>;
  /** One file of dist/console/assets, or 404 P05. */
  consoleAsset(name: string): Promise<BuiltFile>;
  /** The CLI bundle served at /downloads/kiste.js. */
  cliBundle(): Promise<BuiltFile>;
}

const CONTENT_TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.html': 'text/html; charset=utf-8',
};

/** Asset names as Vite writes them: no folders, no leading dot. */
const ASSET_NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$/;

export class DistFiles implements BuiltFiles {
  constructor(private readonly distDir: string) {}

  async consoleShell(): Promise<BuiltFile> {
    return this.required(path.join('console', 'index.html'), 'the web console');
  }

  async consoleAsset(name: string): Promise<BuiltFile> {
    const file = ASSET_NAME.test(name) ? await this.read(path.join('console', 'assets', name)) : null;
    if (file) return file;
    // Without a console build every asset is missing: say so rather than "no such file".
    await this.consoleShell();
    throw new KisteError('P05', { message: `No console file ${name}` });
  }

  async cliBundle(): Promise<BuiltFile> {
    return this.required(path.join('downloads', 'kiste.js'), 'the CLI download');
  }

  private async required(relative: string, what: string): Promise<BuiltFile> {
    const file = await this.read(relative);
    if (!file) throw new KisteError('P12', { message: `The service was started without ${what} (${path.join('dist', relative)} is missing).` });
    return file;
  }

  private async read(relative: string): Promise<BuiltFile | null> {
    const contentType = CONTENT_TYPES[path.extname(relative)] ?? 'text/plain; charset=utf-8';
    try {
      return { body: await readFile(path.join(this.distDir, relative), 'utf8'), contentType };
    } catch {
      return null;
    }
  }
}
