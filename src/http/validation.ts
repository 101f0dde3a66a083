// Request validation comes from the spec only: the generated ajv validators check path and query
// parameters (coerced from strings) and bodies; the first failure becomes 400 P01 naming the field.
import type { ErrorObject, ValidateFunction } from 'ajv';
import paramValidators = require('../generated/validators-params');
import bodyValidators = require('../generated/validators-bodies');
import { KisteError } from '../errors';

function fieldPath(error: ErrorObject, skipSegments: number): string | null {
  const segments = error.instancePath.split('/').slice(1 + skipSegments).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
  const extra = error.params as { missingProperty?: string; additionalProperty?: string };
  if (extra.missingProperty) segments.push(extra.missingProperty);
  if (extra.additionalProperty) segments.push(extra.additionalProperty);
  return segments.length ? segments.join('.') : null;
}

function describe(error: ErrorObject, param: string | null): string {
  if (error.keyword === 'additionalProperties') return `Unknown field '${param}'`;
  if (error.keyword === 'required') return `Missing required field '${param}'`;
  return param ? `Field '${param}' ${error.message}` : `Request body ${error.message}`;
}

export function validateParameters(operationId: string, parameters: { path: unknown; query: unknown }): void {
  const validate = paramValidators[`${operationId}__params`];
  if (!validate || validate(parameters)) return;
  const error = validate.errors![0]!;
  const param = fieldPath(error, 1);
  throw new KisteError('P01', { message: describe(error, param), param });
}

export function validateBody(operationId: string, body: unknown): void {
  const validate = bodyValidators[`${operationId}__body`];
  if (!validate || validate(body)) return;
  const error = validate.errors![0]!;
  const param = fieldPath(error, 0);
  throw new KisteError('P01', { message: describe(error, param), param });
}

/** The validator of one response of one operation, for contract checks. */
export function responseValidator(operationId: string, status: number | 'default'): ValidateFunction | undefined {
  return bodyValidators[`${operationId}__${status}`];
}

/** The validator of one line of an application/x-ndjson answer, when the operation streams one. */
export function streamLineValidator(operationId: string, status: number): ValidateFunction | undefined {
  return bodyValidators[`${operationId}__${status}__line`];
}

/** The validator of the error envelope every non-2xx answer uses. */
export function errorEnvelopeValidator(): ValidateFunction {
  return bodyValidators.ErrorResponse!;
}
