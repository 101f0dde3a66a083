// CLI: npx tsx images/build.ts --profile minimal [--out DIR] [--agent PATH] [--force] [--mirror URL] [--json]
//
// Builds (or finds) the image of a profile and prints where it is. The output folder defaults to
// $KISTE_IMAGE_DIR, else $KISTE_DATA_DIR/images, else data/images.
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { buildImage } from './build-image';
import { PROFILES } from './profiles';
import { createProgressView } from './progress';

export const DEFAULT_AGENT_BUNDLE = resolve(__dirname, '..', 'agent', 'dist', 'kiste-agent.js');

export function defaultImageDir(env: NodeJS.ProcessEnv = process.env): string {
  return resolve(env.KISTE_IMAGE_DIR ?? resolve(env.KISTE_DATA_DIR ?? 'data', 'images'));
}

const USAGE = `usage: npx tsx images/build.ts --profile <${Object.keys(PROFILES).join('|')}> [options]
  --out DIR       output folder (default: $KISTE_IMAGE_DIR, else $KISTE_DATA_DIR/images, else data/images)
  --agent PATH    bundled guest agent (default: agent/dist/kiste-agent.js)
  --force         rebuild the root filesystem from the Debian mirror even when cached
  --mirror URL    Debian mirror (default: $KISTE_DEBIAN_MIRROR or http://deb.debian.org/debian)
  --json          print the result as JSON on stdout`;

async function main(): Promise<number> {
  let args;
  try {
    args = parseArgs({
      options: {
        profile: { type: 'string', default: 'minimal' },
        out: { type: 'string' },
        agent: { type: 'string' },
        force: { type: 'boolean', default: false },
        mirror: { type: 'string' },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    }).values;
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const view = createProgressView(process.stderr);
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const image = await buildImage({
      profile: args.profile!,
      outDir: args.out ?? defaultImageDir(),
      agentBundle: resolve(args.agent ?? DEFAULT_AGENT_BUNDLE),
      force: args.force,
      mirror: args.mirror,
      signal: abort.signal,
      onProgress: (p) => view.update(p),
    });
    view.stop();
    if (args.json) process.stdout.write(`${JSON.stringify(image, (k, v) => (k === 'packages' ? undefined : v), 2)}\n`);
    else {
      const mib = (n: number | undefined) => `${((n ?? 0) / 1024 / 1024).toFixed(1)} MiB`;
      const s = image.manifest.sizes;
      process.stdout.write(
        [
          `${image.profile} image ${image.version}${image.reused ? ' (already built)' : ''} in ${(image.durationMs / 1000).toFixed(1)}s` +
            `${image.rootfsCached ? ', root filesystem from cache' : ''}`,
          `  ${image.dir}`,
          `  kernel ${image.manifest.kernel}  vmlinuz ${mib(s.vmlinuz)}  initrd.img ${mib(s['initrd.img'])}  disk.qcow2 ${mib(s['disk.qcow2'])} (virtual ${mib(s.disk_virtual)})`,
          `  append: ${image.manifest.kernel_cmdline}`,
          '',
        ].join('\n'),
      );
    }
    return 0;
  } catch (err) {
    view.stop();
    process.stderr.write(`image build failed: ${(err as Error).message}\n`);
    return (err as Error).name === 'AbortError' ? 130 : 1;
  }
}

if (require.main === module) {
  void main().then((code) => process.exit(code));
}
