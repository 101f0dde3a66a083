// The whole suite runs twice: once on SQLite (embedded default), once on PostgreSQL.
const base = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { isolatedModules: true }] },
};
module.exports = {
  testTimeout: 30000,
  projects: [
    { ...base, displayName: 'sqlite', setupFiles: ['<rootDir>/test/support/env-sqlite.js'] },
    { ...base, displayName: 'postgres', setupFiles: ['<rootDir>/test/support/env-postgres.js'] },
  ],
};
