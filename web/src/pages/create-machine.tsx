// Create a machine: name, image (the universal one or a ready private image) and environment (optional),
// shape (default, large or custom within the account's limits), the SSH key it trusts, lifetime and
// checkpoint interval (CreateInstanceRequest). From a named snapshot (`?snapshot=<id>`, the Snapshots
// page's "New machine"), the snapshot replaces image and environment and its source's shape is
// filled in. While it is made the page shows the progress (machine/create.ts) and then opens the machine.
import { useState } from 'preact/hooks';
import { api, ok, type Schemas } from '../api';
import { Link } from '../router';
import { Button, ErrorNotice, Field, Loaded, PageHeader, useLoad } from '../ui/kit';
import { useCreateMachine, type CreateBody } from '../machine/create';
import { formatMib, INSTANCE_NAME_HINT, INSTANCE_NAME_PATTERN, machinePath } from '../machine/format';
import { LifetimeSelect } from '../machine/lifetime-select';
import { DEFAULT_SHAPE, describeShape, diskLeftMib, largeShape, shapeProblem, type Shape, type ShapeChoice } from '../machine/shapes';
import { CreateProgressPanel } from './machine/create-progress';
import { MachineAvailabilityNotice } from '../machine/machine-availability';
import { describeResources, fetchImages, UNIVERSAL, type Image } from './images/data';
import { fetchEnvironments } from './environments/data';

type Status = Schemas['ControlPlaneStatusResponse'];

export function CreateMachinePage({ snapshotId }: { snapshotId?: string | null }) {
  const status = useLoad(() => ok(api.GET('/v1/status')), []);
  const snapshot = useLoad(async () => (snapshotId ? ok(api.GET('/v1/snapshots/{id}', { params: { path: { id: snapshotId } } })) : null), [snapshotId]);
  const create = useCreateMachine();
  const { progress } = create;
  return (
    <section class="create-machine">
      <PageHeader title="Create a machine" />
      {progress.stage !== 'waiting-for-image' && progress.stage !== 'booting' && <MachineAvailabilityNotice status={status} />}
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
        <Loaded load={status}>{(data) => <Loaded load={snapshot}>{(from) => <CreateForm status={data} snapshot={from} onSubmit={create.start} />}</Loaded>}</Loaded>
      </div>
    </section>
  );
}

function CreateForm({ status, snapshot, onSubmit }: { status: Status; snapshot: Schemas['SnapshotResponse'] | null; onSubmit(body: CreateBody): void }) {
  const large = largeShape(status.limits);
  const [name, setName] = useState('');
  const [image, setImage] = useState(UNIVERSAL);
  const images = useLoad(fetchImages, []);
  const [environment, setEnvironment] = useState('');
  // From a snapshot: its source's shape (the same vCPUs and memory continue its memory; the disk may grow).
  const [choice, setChoice] = useState<ShapeChoice>(snapshot || shapeProblem(DEFAULT_SHAPE, status) ? 'custom' : 'default');
  const [custom, setCustom] = useState<Shape>(snapshot ? { ...snapshot.source } : { vcpu: 2, memory_mib: 2048, disk_mib: 16 * 1024 });
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
          ...(snapshot ? { snapshot: snapshot.id } : {}),
          ...(!snapshot && image !== UNIVERSAL ? { image } : {}),
          ...(!snapshot && environment ? { environment } : {}),
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

      {snapshot ? (
        <SnapshotSource snapshot={snapshot} shape={shape} />
      ) : (
        <>
          <ImageField
            value={image}
            images={images}
            onChange={(id, chosen) => {
              setImage(id);
              // A private image made with recommended resources: the machine starts with them (changeable).
              if (chosen?.resources) {
                setChoice('custom');
                setCustom({ vcpu: chosen.resources.vcpu, memory_mib: chosen.resources.memory_mib, disk_mib: chosen.resources.disk_mib });
              }
            }}
          />
          <EnvironmentField value={environment} onChange={setEnvironment} />
        </>
      )}

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

/** What a machine made from a snapshot starts as, and whether the chosen shape continues its memory. */
function SnapshotSource({ snapshot, shape }: { snapshot: Schemas['SnapshotResponse']; shape: Shape }) {
  const continues = snapshot.memory && shape.vcpu === snapshot.source.vcpu && shape.memory_mib === snapshot.source.memory_mib;
  return (
    <div class="field snapshot-source">
      <span class="label">From snapshot</span>
      <p>
        <strong>{snapshot.name}</strong> of {snapshot.instance_name} ({describeShape(snapshot.source)}).{' '}
        {continues
          ? 'The machine continues its memory: programs that ran when it was taken run on.'
          : snapshot.memory
            ? 'With another vCPU count or memory size the machine boots its disk (its memory is not continued).'
            : 'It holds a disk: the machine boots it.'}{' '}
        The disk may be larger than {formatMib(snapshot.source.disk_mib)}, not smaller. <Link href="/console/snapshots">All snapshots</Link>
      </p>
    </div>
  );
}

/** The universal image or one of the account's private images; those not ready yet are listed but cannot be chosen. */
function ImageField({ value, images, onChange }: { value: string; images: { data: Image[] | undefined; error: unknown }; onChange(id: string, image: Image | undefined): void }) {
  const own = (images.data ?? []).filter((image) => !image.builtin);
  const chosen = own.find((image) => image.id === value);
  return (
    <Field label="Image" id="machine-image" hint={<ImageHint image={chosen} failed={images.error !== null} />}>
      <select id="machine-image" value={value} aria-describedby="machine-image-hint" onChange={(e) => onChange(e.currentTarget.value, own.find((image) => image.id === e.currentTarget.value))}>
        <option value={UNIVERSAL}>Universal (built-in)</option>
        {own.map((image) => (
          <option key={image.id} value={image.id} disabled={image.status !== 'ready'}>
            {image.name}
            {image.status !== 'ready' ? ` (${image.status})` : ''}
          </option>
        ))}
      </select>
    </Field>
  );
}

function ImageHint({ image, failed }: { image: Image | undefined; failed: boolean }) {
  if (failed) return <>Your private images could not be listed; the universal image is available.</>;
  if (!image) {
    return (
      <>
        Every component this server offers. <Link href="/console/images">Make a private image</Link> of just the ones you need.
      </>
    );
  }
  return (
    <>
      {image.components.length} component{image.components.length === 1 ? '' : 's'}
      {image.resources ? `; recommended: ${describeResources(image.resources)} (filled in below)` : ''}.
    </>
  );
}

/** An environment's current version is applied at create: repositories, variables, secret files, setup script. */
function EnvironmentField({ value, onChange }: { value: string; onChange(value: string): void }) {
  const environments = useLoad(fetchEnvironments, []);
  return (
    <Field
      label="Environment"
      id="machine-environment"
      hint={
        <>
          Optional: its current version's repositories, variables, secret files and setup script are applied to the machine.{' '}
          <Link href="/console/environments">Manage environments</Link>
        </>
      }
    >
      <select id="machine-environment" value={value} aria-describedby="machine-environment-hint" onChange={(e) => onChange(e.currentTarget.value)}>
        <option value="">None</option>
        {(environments.data ?? []).map((environment) => (
          <option key={environment.id} value={environment.name}>
            {environment.name} (version {environment.current_version})
          </option>
        ))}
      </select>
    </Field>
  );
}
