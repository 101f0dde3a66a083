// A confirmed action with its own request state: the button asks first (ConfirmButton), shows that the
// request runs, and why it failed right beneath it, so each row's revoke or delete reports on itself.
import { ConfirmButton, ErrorNotice, useAction, type ConfirmButtonProps } from './kit';

export function ConfirmAction({ action, ...button }: Omit<ConfirmButtonProps, 'busy' | 'onConfirm'> & { action(): Promise<unknown> }) {
  const request = useAction(action);
  return (
    <>
      <ConfirmButton {...button} busy={request.busy} onConfirm={() => void request.run()} />
      <ErrorNotice error={request.error} />
    </>
  );
}
