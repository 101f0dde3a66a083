// Which checkpoint layers compaction merges: the oldest unshared neighbours, only past the bound.
import { MAX_FROZEN_LAYERS, nextMerge } from '../../src/compute/checkpoint-policy';

const layers = (n: number) => Array.from({ length: n }, (_, i) => `m-${i}.qcow2`);

describe('checkpoint compaction policy', () => {
  it('leaves a chain within the bound alone', () => {
    expect(nextMerge(layers(MAX_FROZEN_LAYERS), new Set())).toBeNull();
    expect(nextMerge([], new Set())).toBeNull();
  });

  it('merges the two oldest layers past the bound', () => {
    expect(nextMerge(layers(MAX_FROZEN_LAYERS + 1), new Set())).toEqual({ lower: 'm-0.qcow2', upper: 'm-1.qcow2' });
    expect(nextMerge(layers(3), new Set(), 2)).toEqual({ lower: 'm-0.qcow2', upper: 'm-1.qcow2' });
  });

  it('never touches a layer another chain uses, on either side of a merge', () => {
    expect(nextMerge(layers(5), new Set(['m-0.qcow2']), 3)).toEqual({ lower: 'm-1.qcow2', upper: 'm-2.qcow2' });
    expect(nextMerge(layers(5), new Set(['m-1.qcow2']), 3)).toEqual({ lower: 'm-2.qcow2', upper: 'm-3.qcow2' });
    expect(nextMerge(layers(4), new Set(['m-1.qcow2', 'm-3.qcow2']), 3)).toBeNull(); // no unshared neighbours
  });

  it('repeated merges bring any chain without shared layers down to the bound', () => {
    let chain = layers(12);
    for (let merge = nextMerge(chain, new Set()); merge; merge = nextMerge(chain, new Set())) {
      const { upper } = merge;
      chain = chain.filter((layer) => layer !== upper);
    }
    expect(chain).toHaveLength(MAX_FROZEN_LAYERS);
    expect(chain.slice(1)).toEqual(layers(12).slice(-(MAX_FROZEN_LAYERS - 1))); // the newest checkpoints stay
  });
});
