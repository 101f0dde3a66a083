// The desktop image check: builds the desktop profile and boots it through the service (minutes,
// ~1.3 GiB). Not part of `npm test`, which builds and boots only the minimal image.
const base = require('./jest.config.js').projects[0];
module.exports = {
  ...base,
  displayName: 'desktop-image',
  testMatch: ['**/test/images/desktop.check.ts'],
  testTimeout: 1_800_000,
};
