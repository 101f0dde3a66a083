// Cancelling a derived layer's build (its image was deleted): the builder machine is removed at once,
// which ends the step running in it, and the build rejects as cancelled without publishing a layer.
// The machines are stood in for so the cancel can land mid-install; a real builder is booted by
// test/machines/image-layers.test.ts.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentCallError, type ExecStream, type GuestAgent } from '../../src/compute/guest-agent';
import { BuilderMachines, LayerBuildCancelled, LayerBuilder, LayerBuildRequest } from '../../src/compute/layer-builder';

/** Machines whose install step runs until its builder is destroyed. */
function installingForever() {
  const calls: string[] = [];
  let endInstall: ((error: Error) => void) | null = null;
  let installStarted!: () => void;
  const installing = new Promise<void>((resolve) => (installStarted = resolve));
  const agent = {
    async exec(): Promise<ExecStream> {
      calls.push('exec');
      const ended = new Promise<never>((_, reject) => (endInstall = reject));
      ended.catch(() => undefined);
      installStarted();
      return {
        exit: ended,
        async *[Symbol.asyncIterator]() {
          yield { stream: 'stdout', data: Buffer.from('kiste: apt-get update\n') };
          await ended;
        },
      } as unknown as ExecStream;
    },
  } as unknown as GuestAgent;
  const machines: BuilderMachines = {
    async createDisk(id) { calls.push(`createDisk ${id}`); },
    async boot(id) { calls.push(`boot ${id}`); },
    agent: () => agent,
    async flushGuest() { calls.push('flush'); },
    async stop() { calls.push('stop'); return { sessionSaved: false }; },
    diskTop: () => '/nowhere',
    async destroy(id) {
      calls.push(`destroy ${id}`);
      endInstall?.(new AgentCallError('closed', 'agent client closed'));
    },
  };
  return { machines, calls, installing };
}

describe('LayerBuilder cancel', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'kiste-layers-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  function request(key: string, signal?: AbortSignal, log: string[] = []): LayerBuildRequest {
    return {
      base: { profile: 'minimal', version: 'v1', artifactKey: 'v1', layer: null },
      key, packages: ['hello'], diskMib: 3000, signal, onProgress: () => undefined, onLog: (text) => log.push(text),
    };
  }

  it('removes the builder mid-install when the only request aborts, and publishes nothing', async () => {
    const { machines, calls, installing } = installingForever();
    const builder = new LayerBuilder(machines, (version) => join(dir, version), { info() {}, warn() {} });
    const abort = new AbortController();
    const log: string[] = [];
    const build = builder.build(request('k1', abort.signal, log));
    await installing;
    abort.abort();
    await expect(build).rejects.toBeInstanceOf(LayerBuildCancelled);
    expect(calls).toEqual(['destroy builder-k1', 'createDisk builder-k1', 'boot builder-k1', 'exec', 'destroy builder-k1', 'destroy builder-k1']);
    expect(log.join('')).toContain('the build was cancelled');
    expect(existsSync(join(dir, 'v1', 'layers', 'k1'))).toBe(false);
    expect(existsSync(join(dir, 'v1', 'layers', 'k1.lock'))).toBe(false); // the lock is given back
  });

  it('goes on while another request still waits on the same key', async () => {
    const { machines, calls, installing } = installingForever();
    const builder = new LayerBuilder(machines, (version) => join(dir, version), { info() {}, warn() {} });
    const first = new AbortController();
    const second = new AbortController();
    const builds = [builder.build(request('k2', first.signal)), builder.build(request('k2', second.signal))];
    expect(builds[0]).toBe(builds[1]); // one build per key
    await installing;
    first.abort();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(calls.filter((c) => c.startsWith('destroy'))).toEqual(['destroy builder-k2']); // only the leftover check
    second.abort();
    await expect(builds[0]).rejects.toBeInstanceOf(LayerBuildCancelled);
  });

  it('never boots a builder for a request aborted before its turn', async () => {
    const { machines, calls } = installingForever();
    const builder = new LayerBuilder(machines, (version) => join(dir, version), { info() {}, warn() {} });
    await expect(builder.build(request('k3', AbortSignal.abort()))).rejects.toBeInstanceOf(LayerBuildCancelled);
    expect(calls).not.toContain('boot builder-k3');
  });
});
