// The disk_almost_full decision: usage from the guest's disk metrics, an occurrence opens at 90 %
// (raising the alert once) and closes only below 85 %.
import { diskDecision, diskUsagePercent, DISK_CLEAR_PERCENT, DISK_FULL_PERCENT } from '../../src/domain/alert-checks';

const disk = (used: number, total = 1000) => ({ total_mib: total, used_mib: used, available_mib: total - used });

describe('disk usage', () => {
  it('is the used share in percent, null without a size', () => {
    expect(diskUsagePercent(disk(900))).toBe(90);
    expect(diskUsagePercent(disk(899))).toBe(89.9);
    expect(diskUsagePercent(disk(8000, 8192))).toBe(97.7);
    expect(diskUsagePercent(disk(0, 0))).toBeNull();
  });

  it('is null for figures a guest cannot honestly report (more used than there is)', () => {
    expect(diskUsagePercent(disk(1001))).toBeNull();
    expect(diskUsagePercent(disk(1000))).toBe(100);
  });
});

describe('disk decision', () => {
  it('uses 90 % to open and 85 % to close', () => {
    expect([DISK_FULL_PERCENT, DISK_CLEAR_PERCENT]).toEqual([90, 85]);
  });

  it('raises when usage reaches 90 %, not below', () => {
    expect(diskDecision(undefined, 89.9)).toEqual({ open: false, raise: false });
    expect(diskDecision(false, 89.9)).toEqual({ open: false, raise: false });
    expect(diskDecision(undefined, 90)).toEqual({ open: true, raise: true });
    expect(diskDecision(false, 99)).toEqual({ open: true, raise: true });
  });

  it('raises once per occurrence: nothing while it stays open, again after it fell below 85 %', () => {
    const usage = [50, 91, 95, 88, 86, 91, 84.9, 89, 90, 100];
    let open: boolean | undefined;
    const raisedAt: number[] = [];
    usage.forEach((percent, index) => {
      const decision = diskDecision(open, percent);
      open = decision.open;
      if (decision.raise) raisedAt.push(index);
    });
    expect(raisedAt).toEqual([1, 8]); // 91 % opens; 84.9 % closes; 90 % opens again
  });

  it('keeps the state when the guest reported no disk size', () => {
    expect(diskDecision(true, null)).toEqual({ open: true, raise: false });
    expect(diskDecision(undefined, null)).toEqual({ open: false, raise: false });
  });

  it('takes other thresholds', () => {
    expect(diskDecision(undefined, 10, { fullPercent: 5, clearPercent: 1 })).toEqual({ open: true, raise: true });
    expect(diskDecision(true, 0.5, { fullPercent: 5, clearPercent: 1 })).toEqual({ open: false, raise: false });
  });
});
