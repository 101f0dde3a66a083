// A clock that only moves when the test says so. Starts at the real time, on a whole second
// (stored times round-trip exactly on both databases).
import type { Clock } from '../../src/domain/clock';

export class ManualClock implements Clock {
  private ms: number;

  constructor(start: Date | number = Date.now()) {
    this.ms = Math.floor(new Date(start).getTime() / 1000) * 1000;
  }

  now(): Date {
    return new Date(this.ms);
  }

  advance(ms: number): void {
    this.ms += ms;
  }

  advanceSeconds(seconds: number): void {
    this.advance(seconds * 1000);
  }

  set(date: Date): void {
    this.ms = date.getTime();
  }
}
