// The one way the domain reports a failure: a registry code (openapi.yaml x-kiste-errors) plus
// what is specific to this occurrence. The HTTP layer turns it into the error envelope.
import { ERRORS, ErrorCode } from './generated/errors';

export type { ErrorCode } from './generated/errors';

export interface KisteErrorDetails {
  /** Overrides the registry's generic message (without the "(code: X)" suffix). */
  message?: string;
  hint?: string;
  /** The request field concerned. */
  param?: string | null;
  retryAfterSeconds?: number;
  headers?: Record<string, string>;
}

export class KisteError extends Error {
  readonly code: ErrorCode;
  readonly details: KisteErrorDetails;

  constructor(code: ErrorCode, details: KisteErrorDetails = {}) {
    super(details.message ?? ERRORS[code].message);
    this.name = 'KisteError';
    this.code = code;
    this.details = details;
  }

  get status(): number {
    return ERRORS[this.code].status;
  }
}

export interface ErrorEnvelope {
  error: {
    code: string;
    type: string;
    message: string;
    hint: string;
    param: string | null;
    retryable: boolean;
    request_id: string | null;
    docs_url: string;
  };
}

export function errorEnvelope(error: KisteError, requestId: string | null, baseUrl: string): ErrorEnvelope {
  const definition = ERRORS[error.code];
  const text = (error.details.message ?? definition.message).replace(/\.?$/, '.');
  return {
    error: {
      code: definition.code,
      type: definition.type,
      message: `${text} (code: ${definition.code})`,
      hint: error.details.hint ?? definition.hint,
      param: error.details.param ?? null,
      retryable: definition.retryable,
      request_id: requestId,
      docs_url: `${baseUrl}/docs/errors/${definition.code}`,
    },
  };
}

/** Seconds for Retry-After, when the code or the occurrence names a delay. */
export function retryAfterOf(error: KisteError): number | null {
  return error.details.retryAfterSeconds ?? ERRORS[error.code].retryAfterSeconds ?? null;
}
