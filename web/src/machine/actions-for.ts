// Which actions make sense for a machine in its current state. Lifecycle calls on a machine that is
// busy (starting, stopping, deleting) would only be refused (409 K05), so none is offered then.
import type { Instance } from '../api';

export type MachineAction = 'start' | 'stop' | 'stop-keep-memory' | 'restart' | 'upgrade' | 'fork' | 'snapshot' | 'rename' | 'extend' | 'delete';

/** States in which no operation runs; anything else is on its way to one of them. */
export const SETTLED_STATES = new Set(['running', 'stopped', 'error']);

export function isSettled(instance: Instance): boolean {
  return SETTLED_STATES.has(instance.status);
}

export function actionsFor(instance: Instance): Set<MachineAction> {
  const actions = new Set<MachineAction>();
  if (instance.status === 'deleting' || instance.status === 'deleted') return actions;
  actions.add('rename').add('extend');
  if (!isSettled(instance)) return actions;
  actions.add('delete');
  if (instance.update_available) actions.add('upgrade');
  if (instance.status !== 'error') actions.add('snapshot');
  switch (instance.status) {
    case 'running':
      actions.add('stop').add('stop-keep-memory').add('restart').add('fork');
      break;
    case 'stopped':
      actions.add('start');
      // A fresh boot only differs from a start when a saved session would be continued.
      if (instance.session_saved) actions.add('restart');
      break;
    case 'error':
      actions.add('start').add('restart');
      break;
  }
  return actions;
}
