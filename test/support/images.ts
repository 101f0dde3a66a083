// One image folder for every test on this machine: built once (cached root filesystem), reused.
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildImage } from '../../images';
import { buildAgentBundle } from '../agent/harness';

export const TEST_IMAGE_DIR = process.env.KISTE_IMAGE_DIR ?? join(tmpdir(), 'kiste-image-cache');

/** The minimal image with the current agent (seconds when only the agent changed). */
export async function ensureTestImage(): Promise<void> {
  await buildImage({ profile: 'minimal', outDir: TEST_IMAGE_DIR, agentBundle: buildAgentBundle() });
}

/** The desktop-lite image (a screen with an xterm on it) with the current agent. */
export async function ensureDesktopTestImage(): Promise<void> {
  await buildImage({ profile: 'desktop-lite', outDir: TEST_IMAGE_DIR, agentBundle: buildAgentBundle() });
}
