// Every operation of openapi.yaml is either implemented by a handler or answers P09 until its
// issue lands; the generated registry and the spec agree.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { handlers } from '../../src/generated/handler-registry';
import { OPERATIONS } from '../../src/generated/operations';
import { ERRORS } from '../../src/generated/errors';

const spec = parse(readFileSync(join(__dirname, '../../openapi.yaml'), 'utf8'));
const specOperations = Object.entries<Record<string, any>>(spec.paths).flatMap(([path, item]) =>
  Object.entries(item)
    .filter(([method]) => ['get', 'put', 'post', 'delete', 'patch'].includes(method))
    .map(([method, operation]) => ({ path, method: method.toUpperCase(), operation })),
);

describe('operation registry', () => {
  it('lists every operation of the spec exactly once', () => {
    expect(Object.keys(OPERATIONS).sort()).toEqual(specOperations.map((op) => op.operation.operationId).sort());
    for (const { path, method, operation } of specOperations) {
      const meta = OPERATIONS[operation.operationId as keyof typeof OPERATIONS];
      expect({ path: meta.path, method: meta.method }).toEqual({ path, method });
    }
  });

  it('has a handler function for every implemented operation and none for the others', () => {
    const implemented = Object.values(OPERATIONS).filter((op) => op.implemented).map((op) => op.operationId).sort();
    expect(Object.keys(handlers).sort()).toEqual(implemented);
    for (const handler of Object.values(handlers)) expect(typeof handler).toBe('function');
  });

  it('names only registered error codes as credential refusals', () => {
    for (const op of Object.values(OPERATIONS)) expect(Object.keys(ERRORS)).toContain(op.credentialRefusal);
  });

  it('bounds the body of every operation that takes one (8 KiB on sign-in, OAuth, a private service\'s sign-in, device keys, desktop sessions)', () => {
    const small = ['Login', 'SignUp', 'OAuthAuthorizeDecision', 'OAuthToken', 'AuthorizeServiceAccess', 'AddDeviceKey'];
    for (const op of Object.values(OPERATIONS)) {
      if (op.requestContentTypes.length === 0) continue;
      const expected = small.includes(op.operationId) || op.path.startsWith('/v1/desktop/native') ? 8192 : 65536;
      expect({ id: op.operationId, limit: op.bodyLimit }).toEqual({ id: op.operationId, limit: expected });
    }
  });
});
