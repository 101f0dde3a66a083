// tsc does not copy plain .js files: the generated ajv validators are copied beside the build.
const { copyFileSync, mkdirSync, readdirSync } = require('node:fs');
const { join } = require('node:path');

const from = join(__dirname, '..', 'src', 'generated');
const to = join(__dirname, '..', 'dist', 'src', 'generated');
mkdirSync(to, { recursive: true });
for (const name of readdirSync(from)) {
  if (name.endsWith('.js')) copyFileSync(join(from, name), join(to, name));
}
