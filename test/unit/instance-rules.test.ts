import { KisteError } from '../../src/errors';
import { generateInstanceName } from '../../src/domain/instance-names';
import { checkHostCapacity, checkNewMachine, checkStart } from '../../src/domain/instance-limits';
import { Limits } from '../../src/domain/limits';

const limits = new Limits({ requestsPerMinute: 600, signInAttemptsPerMinute: 30 });
const NAME_PATTERN = /^[a-z][a-z0-9-]{0,61}[a-z0-9]$/;

function codeOf(run: () => void): string | null {
  try {
    run();
    return null;
  } catch (error) {
    return error instanceof KisteError ? error.code : 'not a KisteError';
  }
}

describe('instance names', () => {
  it('generates names that satisfy the spec pattern and rarely repeat', () => {
    const names = Array.from({ length: 500 }, generateInstanceName);
    for (const name of names) expect(name).toMatch(NAME_PATTERN);
    expect(new Set(names).size).toBeGreaterThan(490);
  });
});

describe('instance limits', () => {
  const empty = { machines: 0, runningMachines: 0, diskMib: 0 };
  const shape = { vcpu: 2, memoryMib: 1024, diskMib: 4096 };

  it('lets a first machine of an allowed shape through', () => {
    expect(codeOf(() => checkNewMachine(limits, empty, shape))).toBeNull();
  });

  it('refuses each limit with its own code', () => {
    expect(codeOf(() => checkNewMachine(limits, { ...empty, machines: limits.machines }, shape))).toBe('L02');
    expect(codeOf(() => checkNewMachine(limits, { ...empty, runningMachines: limits.runningMachines }, shape))).toBe('L03');
    expect(codeOf(() => checkNewMachine(limits, { ...empty, diskMib: limits.diskMibTotal - 4095 }, shape))).toBe('L04');
    expect(codeOf(() => checkNewMachine(limits, empty, { ...shape, vcpu: limits.vcpuPerMachine + 1 }))).toBe('L08');
    expect(codeOf(() => checkNewMachine(limits, empty, { ...shape, memoryMib: limits.memoryMibPerMachine + 1 }))).toBe('L08');
    expect(codeOf(() => checkStart(limits, { ...empty, runningMachines: limits.runningMachines }))).toBe('L03');
    expect(codeOf(() => checkHostCapacity(1500, 1024, 512))).toBe('L13');
    expect(codeOf(() => checkHostCapacity(1536, 1024, 512))).toBeNull();
  });

  it('accepts a disk that fills the allowance exactly', () => {
    expect(codeOf(() => checkNewMachine(limits, { ...empty, diskMib: limits.diskMibTotal - 4096 }, shape))).toBeNull();
  });
});
