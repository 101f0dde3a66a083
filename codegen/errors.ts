// Emits src/generated/errors.ts: the error registry (x-kiste-errors) as a typed constant.
import { BANNER, OpenApiDocument } from './spec';

const CODE_PATTERN = /^[KNDSABLCP][0-9]{2}$/;

export function renderErrors(doc: OpenApiDocument): string {
  const registry = doc['x-kiste-errors'];
  if (!Array.isArray(registry) || registry.length === 0) throw new Error('openapi.yaml: x-kiste-errors is missing');
  const seenCodes = new Set<string>();
  const seenTypes = new Set<string>();
  const lines = registry.map((entry) => {
    if (!CODE_PATTERN.test(entry.code)) throw new Error(`error code ${entry.code} does not match ${CODE_PATTERN}`);
    if (seenCodes.has(entry.code)) throw new Error(`error code ${entry.code} defined twice`);
    if (seenTypes.has(entry.type)) throw new Error(`error type ${entry.type} defined twice`);
    seenCodes.add(entry.code);
    seenTypes.add(entry.type);
    const definition = {
      code: entry.code,
      type: entry.type,
      status: entry.status,
      message: entry.message,
      hint: entry.hint,
      retryable: entry.retryable === true,
      retryAfterSeconds: entry.retry_after ?? null,
    };
    return `  ${entry.code}: ${JSON.stringify(definition)},`;
  });
  const enumerated: string[] = doc.components.schemas.ErrorCode?.enum ?? [];
  const missing = [...seenCodes].filter((code) => !enumerated.includes(code));
  const unknown = enumerated.filter((code) => !seenCodes.has(code));
  if (missing.length || unknown.length) {
    throw new Error(`components.schemas.ErrorCode.enum must list exactly the x-kiste-errors codes (missing: ${missing.join(', ') || 'none'}; not registered: ${unknown.join(', ') || 'none'})`);
  }
  return `${BANNER}
export interface ErrorDefinition {
  code: string;
  type: string;
  status: number;
  message: string;
  hint: string;
  retryable: boolean;
  retryAfterSeconds: number | null;
}

export const ERRORS = {
${lines.join('\n')}
} as const satisfies Record<string, ErrorDefinition>;

export type ErrorCode = keyof typeof ERRORS;
`;
}
