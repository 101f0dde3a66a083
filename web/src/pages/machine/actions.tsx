// The machine's actions, only those that make sense in its current state (machine/actions-for.ts).
// Destructive ones ask first; rename, extend and fork ask for their details in a dialog.
import { useState } from 'preact/hooks';
import { api, ok, type Instance } from '../../api';
import { navigate } from '../../router';
import { ConfirmButton, ErrorNotice, Field, useAction } from '../../ui/kit';
import { FormDialog } from '../../ui/form-dialog';
import { actionsFor } from '../../machine/actions-for';
import { LifetimeSelect } from '../../machine/lifetime-select';
import { formatSeconds, INSTANCE_NAME_HINT, INSTANCE_NAME_PATTERN, LIFETIMES, machinePath } from '../../machine/format';
import { deleteMachine, runLifecycle, type LifecycleCall } from './lifecycle';

export function MachineActions({ instance, tab, onChange }: { instance: Instance; tab: string; onChange(instance: Instance): void }) {
  const offered = actionsFor(instance);
  const [pending, setPending] = useState<LifecycleCall | 'delete' | null>(null);
  const lifecycle = useAction(async (call: LifecycleCall) => {
    setPending(call);
    try {
      onChange(await runLifecycle(call, instance.name));
    } finally {
      setPending(null);
    }
  });
  const remove = useAction(async () => {
    setPending('delete');
    try {
      if (await deleteMachine(instance.name)) navigate('/', { replace: true });
      else onChange({ ...instance, status: 'deleting' }); // the page follows instance.deleted
    } finally {
      setPending(null);
    }
  });
  const busy = pending !== null;
  const lifecycleButton = (call: LifecycleCall, label: string, question: string, detail: string, confirmLabel: string, danger = false) =>
    offered.has(call) && (
      <ConfirmButton label={label} question={question} detail={detail} confirmLabel={confirmLabel} danger={danger} disabled={busy} busy={pending === call} onConfirm={() => void lifecycle.run(call)} />
    );
  const name = instance.name;
  return (
    <div class="machine-actions">
      <div class="actions" role="group" aria-label="Machine actions">
        {instance.status !== 'deleting' && <OpenDesktopButton name={instance.name} />}
        {offered.has('start') && (
          <ConfirmButton
            label={instance.session_saved ? 'Resume' : 'Start'}
            question={instance.session_saved ? `Resume ${name}?` : `Start ${name}?`}
            detail={instance.session_saved ? 'It continues its saved memory session where it stopped.' : 'It boots from its disk.'}
            confirmLabel={instance.session_saved ? 'Resume machine' : 'Start machine'}
            disabled={busy}
            busy={pending === 'start'}
            onConfirm={() => void lifecycle.run('start')}
          />
        )}
        {lifecycleButton('stop', 'Stop', `Stop ${name}?`, 'Programs end and the memory is lost; the disk stays.', 'Stop machine', true)}
        {lifecycleButton('stop-keep-memory', 'Stop keeping memory', `Stop ${name} and keep its memory?`, 'The memory session is saved; the next start resumes it where it was.', 'Stop and keep memory')}
        {lifecycleButton('restart', 'Restart', `Restart ${name}?`, 'A fresh boot from its own disk: files stay, programs and any saved session end, a pending image update is applied.', 'Restart machine', true)}
        {lifecycleButton(
          'upgrade',
          'Upgrade',
          `Upgrade ${name} to ${instance.latest_image_version ?? 'the newest image'}?`,
          instance.status === 'running' ? 'It reboots onto the newest image: the session ends, files and packages stay.' : 'Its saved session is dropped; the update applies at its next start.',
          'Upgrade machine',
        )}
        {offered.has('fork') && <ForkDialog instance={instance} disabled={busy} />}
        {offered.has('snapshot') && <SnapshotDialog instance={instance} disabled={busy} />}
        {offered.has('rename') && <RenameDialog instance={instance} tab={tab} disabled={busy} />}
        {offered.has('extend') && <ExtendDialog instance={instance} disabled={busy} onChange={onChange} />}
        {offered.has('delete') && (
          <ConfirmButton
            label="Delete"
            question={`Delete ${name}?`}
            detail="The machine and its disk are removed for good; named snapshots stay."
            confirmLabel="Delete machine"
            danger
            disabled={busy}
            busy={pending === 'delete'}
            onConfirm={() => void remove.run()}
          />
        )}
      </div>
      <ErrorNotice error={lifecycle.error ?? remove.error} />
    </div>
  );
}

function RenameDialog({ instance, tab, disabled }: { instance: Instance; tab: string; disabled: boolean }) {
  const [name, setName] = useState(instance.name);
  return (
    <FormDialog
      label="Rename"
      title={`Rename ${instance.name}`}
      submitLabel="Rename machine"
      disabled={disabled}
      onOpen={() => setName(instance.name)}
      onSubmit={async () => {
        const renamed = await ok(api.POST('/v1/instances/{name}/rename', { params: { path: { name: instance.name } }, body: { name } }));
        navigate(machinePath(renamed.name, tab), { replace: true });
      }}
    >
      <Field label="New name" id="rename-name" hint={`${INSTANCE_NAME_HINT} The host name inside follows at the next cold boot.`}>
        <input id="rename-name" required value={name} pattern={INSTANCE_NAME_PATTERN} maxLength={63} autoComplete="off" spellcheck={false} aria-describedby="rename-name-hint" onInput={(e) => setName(e.currentTarget.value.trim())} />
      </Field>
    </FormDialog>
  );
}

function ExtendDialog({ instance, disabled, onChange }: { instance: Instance; disabled: boolean; onChange(instance: Instance): void }) {
  const [seconds, setSeconds] = useState(LIFETIMES[0]!.seconds);
  return (
    <FormDialog
      label="Extend lifetime"
      title={`Extend the lifetime of ${instance.name}`}
      submitLabel="Extend"
      disabled={disabled}
      onSubmit={async () => onChange(await ok(api.POST('/v1/instances/{name}/extend', { params: { path: { name: instance.name } }, body: { ttl_seconds: seconds } })))}
    >
      <p>{instance.expires_at ? 'The time is added to its current deadline.' : 'It has no automatic stop now; it will stop cleanly this long from now (its disk stays).'}</p>
      <Field label="Extend by" id="extend-by">
        <LifetimeSelect id="extend-by" value={String(seconds)} onChange={(value) => setSeconds(Number(value))} />
      </Field>
    </FormDialog>
  );
}

function ForkDialog({ instance, disabled }: { instance: Instance; disabled: boolean }) {
  const [name, setName] = useState('');
  const [lifetime, setLifetime] = useState('');
  const [withMemory, setWithMemory] = useState(false);
  return (
    <FormDialog
      label="Fork"
      title={`Fork ${instance.name}`}
      submitLabel="Fork machine"
      busyLabel={withMemory ? 'Forking: copying the running machine…' : 'Forking: the copy boots…'}
      disabled={disabled}
      onOpen={() => setName(`${instance.name.slice(0, 58)}-copy`)}
      onSubmit={async () => {
        const body = { name, ttl_seconds: lifetime ? Number(lifetime) : null, memory: withMemory };
        const copy = await ok(api.POST('/v1/instances/{name}/fork', { params: { path: { name: instance.name } }, body }));
        navigate(machinePath(copy.name));
      }}
    >
      <p>
        The copy gets this machine's disk as it is now and {withMemory ? 'its memory, so it goes on where this machine is' : 'boots fresh'}, with the same shape and a checkpoint every {formatSeconds(instance.auto_snapshot_seconds)}.
      </p>
      <Field label="Name of the copy" id="fork-name" hint={INSTANCE_NAME_HINT}>
        <input id="fork-name" required value={name} pattern={INSTANCE_NAME_PATTERN} maxLength={63} autoComplete="off" spellcheck={false} aria-describedby="fork-name-hint" onInput={(e) => setName(e.currentTarget.value.trim())} />
      </Field>
      <Field label="Lifetime of the copy" id="fork-lifetime">
        <LifetimeSelect id="fork-lifetime" value={lifetime} onChange={setLifetime} noneLabel="No automatic stop" />
      </Field>
      <label class="checkbox">
        <input id="fork-memory" type="checkbox" checked={withMemory} onChange={(e) => setWithMemory(e.currentTarget.checked)} />
        {' '}Copy its memory too: the copy continues the running programs (this machine pauses briefly)
      </label>
    </FormDialog>
  );
}

function SnapshotDialog({ instance, disabled }: { instance: Instance; disabled: boolean }) {
  const hasMemory = instance.status === 'running' || Boolean(instance.session_saved);
  const [name, setName] = useState('');
  const [withMemory, setWithMemory] = useState(hasMemory);
  return (
    <FormDialog
      label="Snapshot"
      title={`Take a snapshot of ${instance.name}`}
      submitLabel="Take snapshot"
      disabled={disabled}
      onOpen={() => {
        setName(`${instance.name.slice(0, 40)}-${new Date().toISOString().slice(0, 16).replace(/[-:]/g, '').replace('T', '-')}`);
        setWithMemory(hasMemory);
      }}
      onSubmit={async () => {
        await ok(api.POST('/v1/instances/{name}/snapshots', { params: { path: { name: instance.name } }, body: { name, memory: withMemory } }));
        navigate('/console/snapshots');
      }}
    >
      <p>
        The snapshot keeps the disk as it is now{withMemory ? ' and the memory: machines made from it continue the running programs (this machine pauses briefly)' : ''}. It stays when this machine is deleted.
      </p>
      <Field label="Name" id="snapshot-name" hint="Letters, digits, '.', '_' and '-'; unique in your account.">
        <input id="snapshot-name" required value={name} pattern="[A-Za-z0-9][A-Za-z0-9._\-]{0,62}" maxLength={63} autoComplete="off" spellcheck={false} aria-describedby="snapshot-name-hint" onInput={(e) => setName(e.currentTarget.value.trim())} />
      </Field>
      <label class="checkbox">
        <input id="snapshot-memory" type="checkbox" checked={withMemory} disabled={!hasMemory} onChange={(e) => setWithMemory(e.currentTarget.checked)} />
        {' '}Keep its memory too{hasMemory ? '' : ' (only a running machine, or one stopped keeping its memory, has one)'}
      </label>
    </FormDialog>
  );
}

/**
 * Makes a desktop link and opens the viewer in a new tab. The tab is opened at once (still inside the
 * click, so no pop-up blocker holds it) and sent to the link when it arrives.
 */
function OpenDesktopButton({ name }: { name: string }) {
  const open = useAction(async () => {
    const tab = window.open('about:blank', '_blank');
    try {
      const link = await ok(api.POST('/v1/instances/{name}/desktop-link', { params: { path: { name } }, body: {} }));
      if (tab) {
        tab.opener = null;
        tab.location.href = link.url;
      } else {
        window.location.assign(link.url);
      }
    } catch (error) {
      tab?.close();
      throw error;
    }
  });
  return (
    <>
      <button type="button" class="button primary" disabled={open.busy} onClick={() => void open.run()}>
        Open desktop
      </button>
      <ErrorNotice error={open.error} />
    </>
  );
}
