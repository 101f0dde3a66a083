// Create a machine: name, shape (default, large or custom within the account's limits), the SSH key
// it trusts, lifetime and checkpoint interval (CreateInstanceRequest). While it is made the page
// shows the progress (machine/create.ts) and then opens the machine.
import { useState } from 'preact/hooks';
import { api, ok, type Schemas } from '../api';
import { Link } from '../router';
import { Button, ErrorNotice, Field, Loaded, PageHeader, useLoad } from '../ui/kit';
import { useCreateMachine, type CreateBody } from '../machine/create';
import { formatMib, INSTANCE_NAME_HINT, INSTANCE_NAME_PATTERN, machinePath } from '../machine/format';
import { LifetimeSelect } from '../machine/lifetime-select';
import { DEFAULT_SHAPE, describeShape, diskLeftMib, largeShape, shapeProblem, type Shape, type ShapeChoice } from '../machine/shapes';
import { CreateProgressPanel } from './machine/create-progress';

type Status = Schemas['ControlPlaneStatusResponse'];

export function CreateMachinePage() {
  const status = useLoad(() => ok(api.GET('/v1/status')), []);
  const create = useCreateMachine();
  const { progress } = create;
  return (
    <section class="create-machine">
      <PageHeader title="Create a machine" />
      {(progress.stage === 'waiting-for-image' || progress.stage === 'booting') && <CreateProgressPanel progress={progress} onCancel={create.cancel} />}
      {/* Hidden, not unmounted, while the machine is on its way: after a refusal the form is as it was. */}
      <div hidden={progress.stage === 'waiting-for-image' || progress.stage === 'booting'}>
        {progress.stage === 'failed' && (
          <>
            <ErrorNotice error={progress.error} title="The machine could not be created." />
            {progress.name && (
              <p>
                It exists but did not start: <Link href={machinePath(progress.name)}>open {progress.name}</Link> to see its log or delete it.
              </p>
            )}
          </>
        )}
        <Loaded load={status}>{(data) => <CreateForm status={data} onSubmit={create.start} />}</Loaded>
      </div>
    </section>
  );
}

function CreateForm({ status, onSubmit }: { status: Status; onSubmit(body: CreateBody): void }) {
  const large = largeShape(status.limits);
  const [name, setName] = useState('');
  const [choice, setChoice] = useState<ShapeChoice>(shapeProblem(DEFAULT_SHAPE, status) ? 'custom' : 'default');
  const [custom, setCustom] = useState<Shape>({ vcpu: 2, memory_mib: 2048, disk_mib: 16 * 1024 });
  const [sshKey, setSshKey] = useState('');
  const [lifetime, setLifetime] = useState('');
  const [checkpointMinutes, setCheckpointMinutes] = useState(5);
  const shape = choice === 'default' ? DEFAULT_SHAPE : choice === 'large' ? large : custom;
  const problem = shapeProblem(shape, status);

  return (
    <form
      class="card form"
      onSubmit={(event) => {
        event.preventDefault();
        if (problem) return;
        onSubmit({
          profile: 'desktop',
          ...shape,
          ssh_public_key: sshKey.trim(),
          name: name || null,
          ttl_seconds: lifetime ? Number(lifetime) : null,
          auto_snapshot_seconds: checkpointMinutes * 60,
        });
      }}
    >
      <Field label="Name" id="machine-name" hint={`Optional: one is made up when left empty. ${INSTANCE_NAME_HINT}`}>
        <input id="machine-name" name="name" value={name} pattern={INSTANCE_NAME_PATTERN} maxLength={63} autoComplete="off" spellcheck={false} aria-describedby="machine-name-hint" onInput={(e) => setName(e.currentTarget.value.trim())} />
      </Field>

      <fieldset>
        <legend>Shape</legend>
        <ShapeOption value="default" choice={choice} onChoose={setChoice} label="Default" detail={describeShape(DEFAULT_SHAPE)} problem={shapeProblem(DEFAULT_SHAPE, status)} />
        <ShapeOption value="large" choice={choice} onChoose={setChoice} label="Large" detail={describeShape(large)} problem={shapeProblem(large, status)} />
        <ShapeOption value="custom" choice={choice} onChoose={setChoice} label="Custom" problem={null} />
        {choice === 'custom' && <CustomShape shape={custom} status={status} onChange={setCustom} />}
        {problem && (
          <p class="hint error-text" role="alert">
            {problem}
          </p>
        )}
      </fieldset>

      <SshKeyField value={sshKey} onChange={setSshKey} />

      <Field label="Lifetime" id="machine-lifetime" hint="At its end the machine stops cleanly; its disk stays.">
        <LifetimeSelect id="machine-lifetime" value={lifetime} onChange={setLifetime} noneLabel="No automatic stop" describedBy="machine-lifetime-hint" />
      </Field>

      <Field label="Checkpoint interval (minutes)" id="machine-checkpoints" hint="How often the disk is checkpointed when it changed: 1 to 1440 minutes.">
        <input id="machine-checkpoints" type="number" min={1} max={1440} step={1} required value={checkpointMinutes} aria-describedby="machine-checkpoints-hint" onInput={(e) => setCheckpointMinutes(e.currentTarget.valueAsNumber)} />
      </Field>

      <Button type="submit" variant="primary" disabled={Boolean(problem)}>
        Create machine
      </Button>
    </form>
  );
}

function ShapeOption(props: { value: ShapeChoice; choice: ShapeChoice; label: string; detail?: string; problem: string | null; onChoose(choice: ShapeChoice): void }) {
  const id = `shape-${props.value}`;
  const detail = [props.detail, props.problem?.replace(/\.$/, '')].filter(Boolean).join(': ');
  return (
    <div class="choice">
      <input type="radio" id={id} name="shape" value={props.value} checked={props.choice === props.value} disabled={Boolean(props.problem)} aria-describedby={detail ? `${id}-detail` : undefined} onChange={() => props.onChoose(props.value)} />
      <label for={id}>{props.label}</label>
      {detail && (
        <span class="hint" id={`${id}-detail`}>
          {detail}
        </span>
      )}
    </div>
  );
}

function CustomShape({ shape, status, onChange }: { shape: Shape; status: Status; onChange(shape: Shape): void }) {
  const { limits } = status;
  const diskLeftGib = Math.floor(diskLeftMib(status) / 1024);
  return (
    <div class="shape-fields">
      <Field label="vCPUs" id="shape-vcpu" hint={`1 to ${limits.vcpu_per_machine}`}>
        <input id="shape-vcpu" type="number" required min={1} max={limits.vcpu_per_machine} value={shape.vcpu} aria-describedby="shape-vcpu-hint" onInput={(e) => onChange({ ...shape, vcpu: e.currentTarget.valueAsNumber })} />
      </Field>
      <Field label="Memory (MiB)" id="shape-memory" hint={`256 to ${limits.memory_mib_per_machine}`}>
        <input id="shape-memory" type="number" required min={256} max={limits.memory_mib_per_machine} step={256} value={shape.memory_mib} aria-describedby="shape-memory-hint" onInput={(e) => onChange({ ...shape, memory_mib: e.currentTarget.valueAsNumber })} />
      </Field>
      <Field label="Disk (GiB)" id="shape-disk" hint={`1 to ${diskLeftGib} (${formatMib(diskLeftMib(status))} left on this account)`}>
        <input id="shape-disk" type="number" required min={1} max={diskLeftGib} value={shape.disk_mib / 1024} aria-describedby="shape-disk-hint" onInput={(e) => onChange({ ...shape, disk_mib: Math.round(e.currentTarget.valueAsNumber * 1024) })} />
      </Field>
    </div>
  );
}

/** The key the machine trusts; the account's device keys are trusted anyway, and one can be filled in. */
function SshKeyField({ value, onChange }: { value: string; onChange(value: string): void }) {
  const deviceKeys = useLoad(async () => (await ok(api.GET('/v1/device-keys'))).data, []);
  const keys = deviceKeys.data ?? [];
  return (
    <>
      <Field label="SSH public key" id="machine-ssh-key" hint="One OpenSSH public key line (e.g. ~/.ssh/id_ed25519.pub). The machine also trusts your account's device keys.">
        <textarea id="machine-ssh-key" required rows={3} spellcheck={false} placeholder="ssh-ed25519 AAAA… you@laptop" value={value} aria-describedby="machine-ssh-key-hint" onInput={(e) => onChange(e.currentTarget.value)} />
      </Field>
      {keys.length > 0 && (
        <Field label="Or use one of your device keys" id="machine-device-key">
          <select id="machine-device-key" value="" onChange={(e) => e.currentTarget.value && onChange(e.currentTarget.value)}>
            <option value="">Choose a device key…</option>
            {keys.map((key) => (
              <option key={key.id} value={key.public_key}>
                {key.name} ({key.fingerprint.slice(0, 20)}…)
              </option>
            ))}
          </select>
        </Field>
      )}
    </>
  );
}
