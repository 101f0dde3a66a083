// Which operation of the spec a method and path name; used for the Allow header of 405 answers
// and by the contract checks of the test suite.
import { OPERATIONS, OperationMeta } from '../generated/operations';

const compiled = Object.values(OPERATIONS).map((operation) => ({
  operation: operation as OperationMeta,
  pattern: new RegExp(`^${operation.path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}/?$`),
  // literal segments win over templated ones (/v1/images/resolve before /v1/images/{id})
  specificity: operation.path.split('/').filter((segment) => !segment.startsWith('{')).length,
}));

const literalPaths = new Map<string, OperationMeta[]>();
for (const entry of compiled) {
  if (!entry.operation.path.includes('{')) literalPaths.set(entry.operation.path, [...(literalPaths.get(entry.operation.path) ?? []), entry.operation]);
}

export function operationsForPath(path: string): OperationMeta[] {
  return compiled
    .filter((entry) => entry.pattern.test(path))
    .sort((a, b) => b.specificity - a.specificity)
    .map((entry) => entry.operation);
}

export function allowedMethods(path: string): string[] {
  return [...new Set(operationsForPath(path).map((operation) => operation.method))];
}

export function operationFor(method: string, path: string): OperationMeta | undefined {
  const upper = method.toUpperCase();
  // A literal path beats a template (as in openapi-backend); most requests end here without a RegExp.
  return (
    literalPaths.get(path)?.find((operation) => operation.method === upper) ??
    operationsForPath(path).find((operation) => operation.method === upper)
  );
}
