// A worker's counts in the service's metrics: kiste_guest_links_dropped_total only grows, across
// scrapes of one worker run and across a worker that starts again from zero.
import { ServiceMetrics, type ComputeCounts } from '../../src/observability/metrics';

function droppedAgentLinks(text: string): number {
  const line = text.split('\n').find((l) => l.startsWith('kiste_guest_links_dropped_total{peer="agent"}'));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

describe('the metrics of a worker', () => {
  it('adds what each worker run counted beyond the last scrape', async () => {
    let now: ComputeCounts | null = { run: '2026-11-27T10:00:00.000Z', agentLinksDropped: 3 };
    const metrics = new ServiceMetrics({ machinesByStatus: async () => ({}), computeCounts: async () => now });
    const scrape = async () => droppedAgentLinks((await metrics.text()).body);
    expect(await scrape()).toBe(3);
    expect(await scrape()).toBe(3);
    now = { run: '2026-11-27T10:00:00.000Z', agentLinksDropped: 5 };
    expect(await scrape()).toBe(5);
    now = null; // the worker does not answer: nothing is lost, nothing added
    expect(await scrape()).toBe(5);
    now = { run: '2026-11-27T10:05:00.000Z', agentLinksDropped: 2 }; // started again, counting from zero
    expect(await scrape()).toBe(7);
    metrics.linkDropped('agent'); // one counted in this process
    expect(await scrape()).toBe(8);
  });

  it('scrapes when the worker source fails', async () => {
    const metrics = new ServiceMetrics({ machinesByStatus: async () => ({ running: 1 }), computeCounts: () => Promise.reject(new Error('the worker cannot be reached')) });
    const text = (await metrics.text()).body;
    expect(text).toContain('kiste_machines{status="running"} 1');
    expect(droppedAgentLinks(text)).toBe(0);
  });
});
