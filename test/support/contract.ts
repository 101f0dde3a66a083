// Contract check applied to every response the suite receives: the status is one the operation
// declares (or an error for unknown routes), the body matches the spec's schema for that status,
// errors use the envelope, and x-request-id is present. An off-spec answer fails the test.
import type { Response } from 'supertest';
import { operationFor } from '../../src/http/routes';
import { errorEnvelopeValidator, responseValidator, streamLineValidator } from '../../src/http/validation';
import spec from '../../src/generated/openapi.json';

const ERROR_OPERATION = '__error';

function declaredStatuses(operationId: string): string[] {
  for (const pathItem of Object.values(spec.paths as Record<string, Record<string, any>>)) {
    for (const operation of Object.values(pathItem)) {
      if (operation?.operationId === operationId) return Object.keys(operation.responses ?? {});
    }
  }
  return [];
}

export function checkContract(res: Response): void {
  const request = (res as unknown as { req: { method: string; path: string } }).req;
  const path = request.path.split('?')[0]!;
  const where = `${request.method} ${path} → ${res.status}`;
  if (!res.headers['x-request-id']) throw new Error(`${where}: no x-request-id header`);
  if (res.status === 101) return;
  const operation = operationFor(request.method, path);
  const operationId = operation?.operationId ?? ERROR_OPERATION;
  if (res.status >= 400 || !operation) {
    if (!String(res.headers['content-type']).startsWith('application/json')) throw new Error(`${where}: error answer is not JSON`);
    const validate = errorEnvelopeValidator();
    if (!validate(res.body)) throw new Error(`${where}: error envelope off-spec: ${JSON.stringify(validate.errors)}`);
    const { error } = res.body as { error: { message: string; code: string; request_id: string } };
    if (!error.message.endsWith(`(code: ${error.code})`)) throw new Error(`${where}: message must end with (code: X)`);
    if (error.request_id !== res.headers['x-request-id']) throw new Error(`${where}: request_id differs from x-request-id`);
    if (operation && !declaredStatuses(operationId).includes(String(res.status)) && !declaredStatuses(operationId).includes('default')) {
      throw new Error(`${where}: status not declared for ${operationId}`);
    }
    return;
  }
  if (!declaredStatuses(operationId).includes(String(res.status))) throw new Error(`${where}: status not declared for ${operationId}`);
  const validateLine = streamLineValidator(operationId, res.status);
  if (validateLine) {
    if (!String(res.headers['content-type']).startsWith('application/x-ndjson')) throw new Error(`${where}: stream is not NDJSON`);
    for (const line of res.text.split('\n').filter(Boolean)) {
      if (!validateLine(JSON.parse(line))) throw new Error(`${where}: stream line off-spec: ${line} ${JSON.stringify(validateLine.errors)}`);
    }
    return;
  }
  const validate = responseValidator(operationId, res.status);
  if (!validate) return; // no JSON body declared (redirects, 204, HTML and text pages)
  if (!String(res.headers['content-type']).startsWith('application/json')) throw new Error(`${where}: answer is not JSON`);
  if (!validate(res.body)) throw new Error(`${where}: body off-spec for ${operationId}: ${JSON.stringify(validate.errors)}`);
}
