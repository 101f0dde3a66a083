// Names for instances created without one: two short words and four random characters, which
// read well in a shell prompt and as `<name>.kiste`, and fit the spec's DNS-label pattern.
import { randomInt } from 'node:crypto';

const ADJECTIVES = ['amber', 'brisk', 'calm', 'clever', 'crisp', 'eager', 'fuzzy', 'gentle', 'happy', 'jolly', 'keen', 'lucky',
  'mellow', 'nimble', 'plucky', 'quiet', 'rapid', 'shiny', 'steady', 'sunny', 'swift', 'tidy', 'vivid', 'witty'];
const NOUNS = ['badger', 'cedar', 'comet', 'delta', 'falcon', 'fjord', 'harbor', 'heron', 'island', 'lantern', 'maple', 'meadow',
  'nebula', 'otter', 'pebble', 'pine', 'quartz', 'river', 'robin', 'summit', 'tundra', 'valley', 'willow', 'zephyr'];
const SUFFIX_ALPHABET = 'abcdefghijkmnpqrstuvwxyz23456789';

export function generateInstanceName(): string {
  const pick = (words: string[]) => words[randomInt(words.length)]!;
  let suffix = '';
  for (let i = 0; i < 4; i++) suffix += SUFFIX_ALPHABET[randomInt(SUFFIX_ALPHABET.length)];
  return `${pick(ADJECTIVES)}-${pick(NOUNS)}-${suffix}`;
}
