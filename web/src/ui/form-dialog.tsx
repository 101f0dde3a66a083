// A button that opens a small form in a modal dialog (rename, extend, fork): focus moves into the
// dialog, Escape or Cancel closes it, the dialog stays open with the error when the action fails.
import type { ComponentChildren } from 'preact';
import { useRef } from 'preact/hooks';
import { Button, ErrorNotice, useAction } from './kit';

export function FormDialog(props: {
  /** Names the button that opens the dialog. */
  label: string;
  title: string;
  /** Names the dialog's submit button. */
  submitLabel: string;
  disabled?: boolean;
  /** Called as the dialog opens (to reset its fields). */
  onOpen?(): void;
  /** The work; the dialog closes when it resolves. */
  onSubmit(): Promise<unknown>;
  /** Shown on the submit button while the work runs. */
  busyLabel?: string;
  children: ComponentChildren;
}) {
  const dialog = useRef<HTMLDialogElement>(null);
  const submit = useAction(props.onSubmit);
  return (
    <>
      <Button
        disabled={props.disabled}
        onClick={() => {
          submit.clear();
          props.onOpen?.();
          dialog.current?.showModal();
        }}
      >
        {props.label}
      </Button>
      <dialog ref={dialog} aria-label={props.title} class="confirm">
        <form
          onSubmit={(event) => {
            event.preventDefault();
            void submit.run().then((done) => done && dialog.current?.close());
          }}
        >
          <h2>{props.title}</h2>
          {props.children}
          <ErrorNotice error={submit.error} />
          <div class="actions">
            <button class="button plain" type="button" onClick={() => dialog.current?.close()}>
              Cancel
            </button>
            <Button type="submit" variant="primary" busy={submit.busy}>
              {submit.busy && props.busyLabel ? props.busyLabel : props.submitLabel}
            </Button>
          </div>
        </form>
      </dialog>
    </>
  );
}
