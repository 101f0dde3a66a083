// The whole suite runs twice: once on SQLite (embedded default), once on PostgreSQL.
const base = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: {
    '^.+\\.ts$': 'ts-jest',
    // openapi-backend requires json-schema-ref-parser 16, which ships ESM only; Node loads it
    // natively (require(esm)), jest's module runtime does not, so jest compiles it to CommonJS.
    '^.+/@apidevtools/json-schema-ref-parser/.+\\.js$': ['ts-jest', { tsconfig: { allowJs: true, isolatedModules: true } }],
  },
  transformIgnorePatterns: ['/node_modules/(?!@apidevtools/json-schema-ref-parser/)'],
};
// Suites that run once, in the sqlite project: on PostgreSQL they would prove nothing more and boot
// their guests a second time. Those that use no database at all (unit tests, the agent protocol, the
// QEMU driver, image builds), and real-guest suites whose subject is the host side of a machine:
// its network jail, boot snapshot files, the agent link to a hostile guest, the desktop's video
// path, the layer builder (image-layers), SSH, terminals and the CLI over a guest (remote-access),
// upgrades (operations). The database work they touch on is proved on both databases by the
// integration suites (instances, images and builds, device keys, tunnels and usage, desktop links
// and sessions) and by the machine suites that stay on both (lifecycle, recovery, checkpoints,
// environments, images, create rules). The local worker (local-worker) is the process split; the
// hosted services' proxy with a real guest (hosted-services) has its records proved by the
// integration suites on both. The first start runs the README's way, on its default
// database (SQLite in the data folder).
const ONE_DATABASE = [
  '<rootDir>/test/(unit|agent|compute|images)/',
  '<rootDir>/test/machines/(isolation|boot-snapshots|first-start|hostile-guest|image-layers|remote-access|operations|recovery-midway|worker-machines|worker-display|local-worker|hosted-services)\\.test\\.ts$',
  '<rootDir>/test/integration/(worker-process|worker-tls)\\.test\\.ts$', // no database: the worker never opens one
  '<rootDir>/test/console/desktop-viewer\\.test\\.ts$',
];
// Suites that run once, in the postgres project: several hosts need PostgreSQL (placement under its
// advisory lock, replicas sharing one database), and their machines are proved on one database like
// the process split's.
const POSTGRES_ONLY = ['<rootDir>/test/machines/several-hosts\\.test\\.ts$', '<rootDir>/test/integration/pg-boss-queue\\.test\\.ts$'];
// `npm test` (scripts/run-tests.mjs) runs the suite as jest runs in two lanes, selected here by
// KISTE_TEST_GROUP: the suites that boot real guests (QEMU under TCG takes a core; one at a time per
// lane) and the rest (no guest). The rest ends long before the guest suites, so its lane then runs
// a few guest suites (guests-b: long, with generous waits, no timing asserted) beside the others
// (guests-a). `guests` is both; unset: everything, one file at a time (`npx jest`).
const GUEST_SUITES = [
  'test/machines/(?!cli-image-wait\\.)[^/]+\\.test\\.ts$',
  'test/console/(desktop-viewer|machines)\\.test\\.ts$',
  'test/compute/(machine-display|disks|qemu-process|memory-session|layer-recovery)\\.test\\.ts$',
  'test/images/boot\\.test\\.ts$',
];
const GUEST_SUITES_B = ['test/machines/(image-layers|operations|checkpoints)\\.test\\.ts$'];
const GROUPS = ['guests', 'guests-a', 'guests-b', 'rest'];
const group = process.env.KISTE_TEST_GROUP;
if (group && !GROUPS.includes(group)) throw new Error(`KISTE_TEST_GROUP must be one of ${GROUPS.join(', ')}, not ${group}`);
const rooted = (patterns) => patterns.map((pattern) => `<rootDir>/${pattern}`);
const selected = group && group !== 'rest'
  ? { ...base, testMatch: undefined, testRegex: (group === 'guests-b' ? GUEST_SUITES_B : GUEST_SUITES).map((pattern) => `/${pattern}`) }
  : base;
const leftOut = { rest: rooted(GUEST_SUITES), 'guests-a': rooted(GUEST_SUITES_B) }[group] ?? [];
const ignore = (more) => ['/node_modules/', ...more, ...leftOut];
module.exports = {
  testTimeout: 30000,
  projects: [
    { ...selected, displayName: 'sqlite', setupFiles: ['<rootDir>/test/support/env-sqlite.js'], testPathIgnorePatterns: ignore(POSTGRES_ONLY) },
    { ...selected, displayName: 'postgres', setupFiles: ['<rootDir>/test/support/env-postgres.js'], testPathIgnorePatterns: ignore(ONE_DATABASE) },
  ],
};
