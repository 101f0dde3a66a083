// Emits src/generated/operations.ts (per-operation metadata from the spec's x-kiste-* extensions)
// and src/generated/handler-registry.ts (imports handlers/<OperationId>.ts for every implemented
// operation, so a missing or mistyped handler fails the typecheck).
import { BANNER, OpenApiDocument, operationsOf, resolveRef } from './spec';

const CREDENTIAL_KINDS = ['browser', 'cli', 'api_key'];
const RATE_BUDGETS = ['default', 'metrics', 'login'];
const V1_BODY_LIMIT = 64 * 1024;

export function renderOperations(doc: OpenApiDocument): string {
  const entries = operationsOf(doc).map(({ operationId, method, path, operation }) => {
    const credentials: string[] = operation['x-kiste-credentials'] ?? [];
    for (const kind of credentials) {
      if (!CREDENTIAL_KINDS.includes(kind)) throw new Error(`${operationId}: unknown credential kind ${kind}`);
    }
    const budget = operation['x-kiste-rate-budget'] ?? 'default';
    if (!RATE_BUDGETS.includes(budget)) throw new Error(`${operationId}: unknown rate budget ${budget}`);
    const requestBody = resolveRef(doc, operation.requestBody);
    const contentTypes = requestBody ? Object.keys(requestBody.content ?? {}) : [];
    const bodyLimit = operation['x-kiste-body-limit'] ?? (requestBody && path.startsWith('/v1/') ? V1_BODY_LIMIT : null);
    const successStatuses = Object.keys(operation.responses ?? {})
      .filter((status) => /^[123]\d\d$/.test(status))
      .map(Number);
    const meta = {
      operationId,
      method: method.toUpperCase(),
      path,
      credentials,
      credentialRefusal: operation['x-kiste-credential-refusal'] ?? 'A04',
      bodyLimit,
      bodyRequired: Boolean(requestBody?.required),
      requestContentTypes: contentTypes,
      rateBudget: budget,
      implemented: operation['x-kiste-implemented'] === true,
      needsCompute: operation['x-kiste-compute'] === true,
      successStatuses,
    };
    return `  ${operationId}: ${JSON.stringify(meta)},`;
  });
  const implemented = operationsOf(doc).filter((op) => op.operation['x-kiste-implemented'] === true);
  return `${BANNER}
import type { ErrorCode } from './errors';

export type CredentialKind = 'browser' | 'cli' | 'api_key';
export type RateBudget = ${RATE_BUDGETS.map((b) => `'${b}'`).join(' | ')};

export interface OperationMeta {
  operationId: string;
  method: string;
  path: string;
  /** Credential kinds allowed; empty for public operations. */
  credentials: readonly CredentialKind[];
  /** Error answered when a signed-in credential kind is not allowed. */
  credentialRefusal: ErrorCode;
  /** Request body limit in bytes; null when the operation takes no body. */
  bodyLimit: number | null;
  bodyRequired: boolean;
  requestContentTypes: readonly string[];
  rateBudget: RateBudget;
  /** False while a later issue still owes the behaviour (answers P09). */
  implemented: boolean;
  /** Needs the machines' host: 503 N01 while it cannot be reached. */
  needsCompute: boolean;
  successStatuses: readonly number[];
}

export const OPERATIONS = {
${entries.join('\n')}
} as const satisfies Record<string, OperationMeta>;

export type OperationId = keyof typeof OPERATIONS;
export type ImplementedOperationId = ${implemented.length ? implemented.map((op) => `'${op.operationId}'`).join(' | ') : 'never'};
`;
}

export function renderHandlerRegistry(doc: OpenApiDocument): string {
  const implemented = operationsOf(doc).filter((op) => op.operation['x-kiste-implemented'] === true);
  const imports = implemented.map((op) => `import { handler as ${op.operationId} } from '../../handlers/${op.operationId}';`);
  return `${BANNER}
import type { Handler } from '../http/handler';
import type { ImplementedOperationId } from './operations';
${imports.join('\n')}

export const handlers: { [K in ImplementedOperationId]: Handler<K> } = {
${implemented.map((op) => `  ${op.operationId},`).join('\n')}
};
`;
}
