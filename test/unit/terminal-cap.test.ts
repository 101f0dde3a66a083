// The per-account terminal cap (409 L10) under concurrency: each create holds its slot from before
// its first await until its session ends, so creates that arrive together cannot pass the cap
// together; failed creates and ended sessions give theirs back. Strict fakes for the instances.
import type { GuestAgents } from '../../src/compute/machine-host';
import type { Instances } from '../../src/domain/instances';
import { Terminals, TERMINALS_PER_ACCOUNT } from '../../src/domain/terminals';
import { KisteError } from '../../src/errors';
import { strictFake } from '../support/strict-fake';

const later = <T>(value: T) => new Promise<T>((resolve) => setTimeout(() => resolve(value), 5 + Math.random() * 20));

function setup() {
  const instances = strictFake<Instances>('Instances', {
    running: async (_accountId: string, name: string) => {
      if (name === 'stopped') throw new KisteError('K03');
      return later({ id: `id-${name}`, name }) as never;
    },
  });
  return new Terminals(instances, strictFake<GuestAgents>('GuestAgents', {}), { now: () => new Date() });
}

test(`30 creates at once from one account make ${TERMINALS_PER_ACCOUNT} terminals; the rest are 409 L10; another account is not held back`, async () => {
  const terminals = setup();
  const outcomes = await Promise.allSettled(Array.from({ length: 30 }, () => terminals.create('acct-a', 'box', {})));
  const made = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value.session] : []));
  const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [(o.reason as KisteError).code] : []));
  expect(made).toHaveLength(TERMINALS_PER_ACCOUNT);
  expect(refused).toEqual(Array(30 - TERMINALS_PER_ACCOUNT).fill('L10'));
  await expect(terminals.create('acct-b', 'box', {})).resolves.toMatchObject({ token: expect.stringMatching(/^kiste_term_/) });

  made[0]!.end('closed by the test');
  expect(terminals.count('acct-a')).toBe(TERMINALS_PER_ACCOUNT - 1);
  await expect(terminals.create('acct-a', 'box', {})).resolves.toBeDefined();
  await expect(terminals.create('acct-a', 'box', {})).rejects.toMatchObject({ code: 'L10' });
  terminals.closeAll();
  expect(terminals.count('acct-a')).toBe(0);
  expect(terminals.count('acct-b')).toBe(0);
});

test('creates that fail give their slots back', async () => {
  const terminals = setup();
  const outcomes = await Promise.allSettled(Array.from({ length: 20 }, () => terminals.create('acct-a', 'stopped', {})));
  expect(outcomes.every((o) => o.status === 'rejected')).toBe(true);
  expect(terminals.count('acct-a')).toBe(0);
  await expect(terminals.create('acct-a', 'box', { cols: 5000 })).rejects.toMatchObject({ code: 'P01' });
  expect(terminals.count('acct-a')).toBe(0);
  terminals.closeAll();
});
