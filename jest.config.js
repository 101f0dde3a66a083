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
module.exports = {
  testTimeout: 30000,
  projects: [
    { ...base, displayName: 'sqlite', setupFiles: ['<rootDir>/test/support/env-sqlite.js'] },
    // guest tests that use no database boot their machines once, in the sqlite project
    { ...base, displayName: 'postgres', setupFiles: ['<rootDir>/test/support/env-postgres.js'], testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/compute/machine-display\\.test\\.ts$'] },
  ],
};
