// The console's small building blocks: loading/error/empty states, confirmations, copy buttons,
// shown-once secrets and times. Every control has an accessible name (tests find them by role).
import type { ButtonHTMLAttributes, ComponentChildren } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from '../api';
import { useFocusWhenShown } from './focus';

/** A request's state for a page: data, error, and a way to load it again. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { data: T | undefined; error: ApiError | null; loading: boolean; reload(): void; set(data: T): void } {
  const [state, setState] = useState<{ data: T | undefined; error: ApiError | null; loading: boolean }>({ data: undefined, error: null, loading: true });
  const generation = useRef(0);
  const run = useCallback(() => {
    const mine = ++generation.current;
    setState((previous) => ({ ...previous, loading: true }));
    load().then(
      (data) => mine === generation.current && setState({ data, error: null, loading: false }),
      (error: unknown) => mine === generation.current && setState((previous) => ({ data: previous.data, error: asApiError(error), loading: false })),
    );
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  useEffect(run, [run]);
  return { ...state, reload: run, set: (data: T) => setState({ data, error: null, loading: false }) };
}

export function asApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  return new ApiError(error instanceof Error ? error.message : String(error), 0, null, null, null);
}

/** Runs an action, remembering whether it is under way and how it failed. */
export function useAction<A extends unknown[]>(action: (...args: A) => Promise<unknown>): { run(...args: A): Promise<boolean>; busy: boolean; error: ApiError | null; clear(): void } {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const run = async (...args: A) => {
    setBusy(true);
    setError(null);
    try {
      await action(...args);
      return true;
    } catch (failure) {
      setError(asApiError(failure));
      return false;
    } finally {
      setBusy(false);
    }
  };
  return { run, busy, error, clear: () => setError(null) };
}

/** The envelope's message ends in "(code: X)"; the console shows the code on its own line instead. */
export function withoutCode(message: string): string {
  return message.replace(/\s*\(code: [A-Z]\d{2}\)$/, '');
}

export function ErrorNotice({ error, title }: { error: ApiError | null; title?: string }) {
  if (!error) return null;
  const message = withoutCode(error.message);
  return (
    <div class="notice error" role="alert">
      <strong>{title ?? message}</strong>
      {title && <p>{message}</p>}
      {error.hint && <p class="hint">{error.hint}</p>}
      <p class="meta">
        {error.code && <span>Code {error.code}</span>}
        {error.requestId && <span>Request id <code>{error.requestId}</code></span>}
      </p>
    </div>
  );
}

export function Loading({ label = 'Loading…' }: { label?: string }) {
  return (
    <p class="loading" role="status" aria-live="polite">
      <span class="spinner" aria-hidden="true" />
      {label}
    </p>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <div class="empty">{children}</div>;
}

/** Loading, error or the content, for the usual page that loads one thing. */
export function Loaded<T>({ load, children }: { load: { data: T | undefined; error: ApiError | null; loading: boolean }; children: (data: T) => ComponentChildren }) {
  if (load.data !== undefined) {
    return (
      <>
        <ErrorNotice error={load.error} />
        {children(load.data)}
      </>
    );
  }
  if (load.error) return <ErrorNotice error={load.error} />;
  return <Loading />;
}

type ButtonProps = ButtonHTMLAttributes & { busy?: boolean; variant?: 'primary' | 'danger' | 'plain' };

export function Button({ busy, variant = 'plain', children, disabled, class: className, ...rest }: ButtonProps) {
  return (
    <button type="button" {...rest} class={`button ${variant} ${className ?? ''}`} disabled={Boolean(disabled) || busy} aria-busy={busy ? 'true' : undefined}>
      {busy && <span class="spinner" aria-hidden="true" />}
      {children}
    </button>
  );
}

/**
 * A button that asks first (a modal dialog: focus moves into it, Escape cancels). `label` names the
 * button, `confirmLabel` the dialog's confirming button.
 */
export interface ConfirmButtonProps {
  label: string;
  question: string;
  detail?: ComponentChildren;
  confirmLabel?: string;
  danger?: boolean;
  disabled?: boolean;
  busy?: boolean;
  onConfirm(): void;
}

export function ConfirmButton(props: ConfirmButtonProps) {
  const dialog = useRef<HTMLDialogElement>(null);
  return (
    <>
      <Button variant={props.danger ? 'danger' : 'plain'} disabled={props.disabled} busy={props.busy} onClick={() => dialog.current?.showModal()}>
        {props.label}
      </Button>
      <dialog ref={dialog} aria-label={props.question} class="confirm">
        <form
          method="dialog"
          onSubmit={(event) => {
            const submitter = (event as SubmitEvent).submitter as HTMLButtonElement | null;
            if (submitter?.value === 'confirm') props.onConfirm();
          }}
        >
          <h2>{props.question}</h2>
          {props.detail && <div class="detail">{props.detail}</div>}
          <div class="actions">
            <button class="button plain" value="cancel" type="submit">
              Cancel
            </button>
            <button class={`button ${props.danger ? 'danger' : 'primary'}`} value="confirm" type="submit">
              {props.confirmLabel ?? props.label}
            </button>
          </div>
        </form>
      </dialog>
    </>
  );
}

export function CopyButton({ value, label = 'Copy' }: { value: string; label?: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <Button
      onClick={async () => {
        await navigator.clipboard.writeText(value).catch(() => undefined);
        setCopied(true);
        setTimeout(() => setCopied(false), 1500);
      }}
    >
      {copied ? 'Copied' : label}
    </Button>
  );
}

/**
 * A secret the service shows only once (null: none now): the value, a copy button and a warning. It
 * takes the focus when it appears; "Done" hands it back to the field `returnFocusTo` (an id).
 */
export function ShownOnce({ label, value, returnFocusTo, onDone }: { label: string; value: string | null; returnFocusTo: string; onDone(): void }) {
  const container = useFocusWhenShown<HTMLDivElement>(value);
  return (
    <div ref={container}>
      {value && (
        <div class="notice success" role="region" aria-label={label}>
          <strong>{label}</strong>
          <p>It is shown only this once: copy it now and keep it somewhere safe.</p>
          <div class="secret">
            <code data-testid="secret">{value}</code>
            <CopyButton value={value} label={`Copy ${label.charAt(0).toLowerCase()}${label.slice(1)}`} />
          </div>
          <Button
            onClick={() => {
              onDone();
              document.getElementById(returnFocusTo)?.focus();
            }}
          >
            Done
          </Button>
        </div>
      )}
    </div>
  );
}

const relative = new Intl.RelativeTimeFormat('en', { numeric: 'auto' });

export function formatRelative(iso: string, now = Date.now()): string {
  const seconds = Math.round((new Date(iso).getTime() - now) / 1000);
  const units: [Intl.RelativeTimeFormatUnit, number][] = [['day', 86400], ['hour', 3600], ['minute', 60]];
  for (const [unit, size] of units) if (Math.abs(seconds) >= size) return relative.format(Math.round(seconds / size), unit);
  return relative.format(seconds, 'second');
}

export function Time({ iso, empty = '—' }: { iso: string | null | undefined; empty?: string }) {
  if (!iso) return <>{empty}</>;
  return (
    <time dateTime={iso} title={new Date(iso).toLocaleString()}>
      {formatRelative(iso)}
    </time>
  );
}

export function PageHeader({ title, children }: { title: string; children?: ComponentChildren }) {
  useEffect(() => {
    document.title = `${title} · kiste`;
  }, [title]);
  return (
    <header class="page-header">
      <h1>{title}</h1>
      {children && <div class="actions">{children}</div>}
    </header>
  );
}

/** A labelled form field: the label names the control for screen readers and tests. */
export function Field({ label, hint, children, id }: { label: string; hint?: ComponentChildren; id: string; children: ComponentChildren }) {
  return (
    <div class="field">
      <label for={id}>{label}</label>
      {children}
      {hint && (
        <p class="hint" id={`${id}-hint`}>
          {hint}
        </p>
      )}
    </div>
  );
}

export function StatusBadge({ status }: { status: string }) {
  return <span class={`badge status-${status}`}>{status.replace(/_/g, ' ')}</span>;
}
