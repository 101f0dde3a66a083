// `npm run codegen`: regenerates everything derived from openapi.yaml, worker-api.yaml and
// prisma/schema.prisma.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import openapiTS, { astToString } from 'openapi-typescript';
import { BANNER, GENERATED_DIR, loadSpec } from './spec';
import { renderErrors } from './errors';
import { renderHandlerRegistry, renderOperations } from './operations';
import { renderValidators, VALIDATORS_DTS } from './validators';
import { generatePrismaClients } from './prisma';

function write(name: string, content: string): void {
  writeFileSync(join(GENERATED_DIR, name), content);
  console.log(`  wrote src/generated/${name}`);
}

async function main(): Promise<void> {
  mkdirSync(GENERATED_DIR, { recursive: true });
  const doc = loadSpec();
  console.log('codegen: openapi.yaml');
  write('openapi.json', JSON.stringify(doc, null, 2) + '\n');
  const ast = await openapiTS(doc as any, { alphabetize: true, enumValues: true });
  write('api.ts', BANNER + astToString(ast));
  write('errors.ts', renderErrors(doc));
  write('operations.ts', renderOperations(doc));
  write('handler-registry.ts', renderHandlerRegistry(doc));
  const validators = renderValidators(doc);
  write('validators-params.js', validators.params);
  write('validators-bodies.js', validators.bodies);
  write('validators-params.d.ts', VALIDATORS_DTS);
  write('validators-bodies.d.ts', VALIDATORS_DTS);
  console.log('codegen: worker-api.yaml');
  const worker = loadSpec('worker-api.yaml');
  const fromWorkerSpec = (text: string) => text.replace(BANNER, BANNER.replace('openapi.yaml', 'worker-api.yaml'));
  write('worker-api.ts', fromWorkerSpec(BANNER + astToString(await openapiTS(worker as any, { alphabetize: true, enumValues: true }))));
  write('worker-validators.js', fromWorkerSpec(renderValidators(worker, ['WorkerError', 'ExecStreamEnd', 'LayerBuildStart', 'LayerBuildMessage', 'MachineMoveStart', 'MachineMoveEnd', 'MachineMoveOutcome', 'ScreenVideoMessage', 'ScreenVideoCommand']).bodies));
  write('worker-validators.d.ts', fromWorkerSpec(VALIDATORS_DTS));
  if (!process.argv.includes('--skip-prisma')) {
    console.log('codegen: prisma/schema.prisma');
    await generatePrismaClients();
  }
}

main().catch((error) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
