// Machines on a kiste-worker, through worker-api.yaml: the control plane's stand-in for the
// in-process QemuMachineHost (issue 22). Every answer is the worker client's checked one; a machine
// operation that failed on the worker fails here with the worker's message.
import type { components } from '../generated/worker-api';
import type { CreatedMachine, ForkedMachine, GuestIdentity, HostImage, Machines, MachineShape, SnapshotRef, StartedMachine, TakenSnapshot } from './machine-host';
import type { Duplex } from 'node:stream';
import { byteStream } from '../net/websocket';
import type { MachineScreens } from './guest-display';
import type { DisplaySize } from './machine-display';
import type { WorkerCalls } from './worker-client';
import { fromWire, machinePath, wire } from './worker-wire';
import type { ScreenVideo, ScreenVideoEvents, ScreenVideoRequest } from '../media/screen-video';
import { followScreenVideo, screenVideoPath } from './remote-screen-video';

type Wire = components['schemas'];

/** A machine operation may take this long under TCG (a cold boot of a desktop image, a large copy). */
const MACHINE_OPERATION_MS = 15 * 60_000;
/** The screen's RFB handshake happens before the 101; a loaded TCG guest's VNC server can be slow to answer. */
const SCREEN_VIDEO_OPEN_MS = 30_000;

export class RemoteMachines implements Machines, MachineScreens {
  constructor(private readonly worker: WorkerCalls) {}

  private start(operationId: 'CreateMachine' | 'BootMachine' | 'ResumeMachine', id: string, action: string, image: HostImage, shape: MachineShape, identity: GuestIdentity) {
    const body: Wire['StartRequest'] = { image: wire.image(image), shape: wire.shape(shape), identity: wire.identity(identity) };
    return this.worker.call('POST', machinePath(id, action), operationId, body, MACHINE_OPERATION_MS) as Promise<Wire['StartedMachine']>;
  }

  async create(id: string, image: HostImage, shape: MachineShape, identity: GuestIdentity): Promise<CreatedMachine> {
    return fromWire.started(await this.start('CreateMachine', id, 'create', image, shape, identity));
  }

  async fork(sourceId: string, targetId: string, image: HostImage, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<ForkedMachine> {
    const body: Wire['ForkRequest'] = { source_id: sourceId, image: wire.image(image), shape: wire.shape(shape), identity: wire.identity(identity), memory: options.memory };
    return fromWire.started((await this.worker.call('POST', machinePath(targetId, 'fork'), 'ForkMachine', body, MACHINE_OPERATION_MS)) as Wire['StartedMachine']);
  }

  async takeSnapshot(id: string, snapshotId: string, shape: MachineShape, options: { memory: boolean }): Promise<TakenSnapshot> {
    const body: Wire['TakeSnapshotRequest'] = { shape: wire.shape(shape), memory: options.memory };
    const taken = (await this.worker.call('POST', `${machinePath(id, 'snapshots')}/${encodeURIComponent(snapshotId)}`, 'TakeSnapshot', body, MACHINE_OPERATION_MS)) as Wire['TakenSnapshot'];
    return { memory: taken.memory, sizeBytes: taken.size_bytes, pausedMs: taken.paused_ms };
  }

  async createFromSnapshot(id: string, snapshotId: string, images: { memory: HostImage; boot: HostImage }, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<CreatedMachine> {
    const body: Wire['FromSnapshotRequest'] = {
      snapshot_id: snapshotId, memory_image: wire.image(images.memory), boot_image: wire.image(images.boot), shape: wire.shape(shape), identity: wire.identity(identity), memory: options.memory,
    };
    return fromWire.started((await this.worker.call('POST', machinePath(id, 'from-snapshot'), 'CreateMachineFromSnapshot', body, MACHINE_OPERATION_MS)) as Wire['StartedMachine']);
  }

  async deleteSnapshot(snapshot: SnapshotRef): Promise<void> {
    await this.worker.call('DELETE', `/w1/snapshots/${encodeURIComponent(snapshot.id)}`, 'DeleteSnapshot', undefined, MACHINE_OPERATION_MS);
  }

  async boot(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    return { hostKeys: fromWire.started(await this.start('BootMachine', id, 'boot', image, shape, identity)).hostKeys };
  }

  async resume(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    return { hostKeys: fromWire.started(await this.start('ResumeMachine', id, 'resume', image, shape, identity)).hostKeys };
  }

  async refreshIdentity(id: string, identity: GuestIdentity): Promise<void> {
    await this.worker.call('PUT', machinePath(id, 'identity'), 'RefreshIdentity', wire.identity(identity), MACHINE_OPERATION_MS);
  }

  private async state(id: string): Promise<Wire['MachineState']> {
    return (await this.worker.call('GET', machinePath(id), 'GetMachine')) as Wire['MachineState'];
  }

  async hasSession(id: string): Promise<boolean> {
    return (await this.state(id)).session_saved;
  }

  async isRunning(id: string): Promise<boolean> {
    return (await this.state(id)).running;
  }

  async discardSession(id: string): Promise<void> {
    await this.worker.call('DELETE', machinePath(id, 'session'), 'DiscardSession');
  }

  async stop(id: string, options: { saveSession: boolean }): Promise<{ sessionSaved: boolean }> {
    const answer = (await this.worker.call('POST', machinePath(id, 'stop'), 'StopMachine', { save_session: options.saveSession }, MACHINE_OPERATION_MS)) as { session_saved: boolean };
    return { sessionSaved: answer.session_saved };
  }

  async adopt(id: string): Promise<boolean> {
    return ((await this.worker.call('POST', machinePath(id, 'adopt'), 'AdoptMachine', undefined, 60_000)) as Wire['Alive']).alive;
  }

  async checkpoint(id: string): Promise<{ taken: boolean }> {
    return (await this.worker.call('POST', machinePath(id, 'checkpoint'), 'CheckpointMachine', undefined, MACHINE_OPERATION_MS)) as { taken: boolean };
  }

  async removeUnusedLayers(): Promise<void> {
    await this.worker.call('POST', '/w1/layers/collect', 'CollectLayers', undefined, MACHINE_OPERATION_MS);
  }

  async removeStrays(owned: readonly string[]): Promise<string[]> {
    return ((await this.worker.call('POST', '/w1/strays', 'RemoveStrays', { ids: owned }, MACHINE_OPERATION_MS)) as Wire['MachineIds']).ids;
  }

  async destroy(id: string): Promise<void> {
    await this.worker.call('DELETE', machinePath(id), 'DestroyMachine', undefined, MACHINE_OPERATION_MS);
  }

  async consoleTail(id: string, lines: number): Promise<string> {
    return ((await this.worker.call('GET', `${machinePath(id, 'console')}?lines=${lines}`, 'ConsoleTail')) as { text: string }).text;
  }

  async knownMachineIds(): Promise<string[]> {
    return ((await this.worker.call('GET', '/w1/machines', 'ListMachines')) as Wire['MachineIds']).ids;
  }

  async imageDisplay(id: string): Promise<DisplaySize | null> {
    return ((await this.worker.call('GET', machinePath(id, 'screen'), 'GetMachineScreen')) as Wire['MachineScreen']).display;
  }

  openVideo(id: string, request: ScreenVideoRequest, events: ScreenVideoEvents): Promise<ScreenVideo> {
    // Opening includes the screen's handshake on the worker: a machine whose screen does not answer is refused with the reason.
    return this.worker.upgrade(screenVideoPath(id, request), 'OpenScreenVideo', (ws) => followScreenVideo(ws, request, events), SCREEN_VIDEO_OPEN_MS);
  }

  async openScreen(id: string): Promise<Duplex> {
    const screen = await this.worker.upgrade(machinePath(id, 'screen/rfb'), 'OpenScreen', byteStream);
    if (screen.errored) throw screen.errored; // broken by what came with the 101
    return screen;
  }
}
