// Small checks for request params: the bundle carries no schema library, and a bad request must be
// answered with bad_request rather than crash a handler halfway.
import { AgentError } from './errors';

export type Params = Record<string, unknown>;

export function object(value: unknown): Params {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw new AgentError('bad_request', 'params must be an object');
  return value as Params;
}

export function str(p: Params, key: string, opts: { optional?: boolean; max?: number } = {}): string | undefined {
  const v = p[key];
  if (v === undefined || v === null) {
    if (opts.optional) return undefined;
    throw new AgentError('bad_request', `${key} is required`);
  }
  if (typeof v !== 'string') throw new AgentError('bad_request', `${key} must be a string`);
  if (opts.max !== undefined && v.length > opts.max) throw new AgentError('bad_request', `${key} is longer than ${opts.max}`);
  return v;
}

export function int(p: Params, key: string, opts: { optional?: boolean; min?: number; max?: number } = {}): number | undefined {
  const v = p[key];
  if (v === undefined || v === null) {
    if (opts.optional) return undefined;
    throw new AgentError('bad_request', `${key} is required`);
  }
  if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw new AgentError('bad_request', `${key} must be an integer`);
  if (opts.min !== undefined && v < opts.min) throw new AgentError('bad_request', `${key} must be >= ${opts.min}`);
  if (opts.max !== undefined && v > opts.max) throw new AgentError('bad_request', `${key} must be <= ${opts.max}`);
  return v;
}

export function bool(p: Params, key: string, fallback?: boolean): boolean {
  const v = p[key];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new AgentError('bad_request', `${key} is required`);
  }
  if (typeof v !== 'boolean') throw new AgentError('bad_request', `${key} must be a boolean`);
  return v;
}

export function strings(p: Params, key: string, opts: { min?: number; max?: number } = {}): string[] {
  const v = p[key];
  if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) throw new AgentError('bad_request', `${key} must be an array of strings`);
  if (opts.min !== undefined && v.length < opts.min) throw new AgentError('bad_request', `${key} needs at least ${opts.min} item(s)`);
  if (opts.max !== undefined && v.length > opts.max) throw new AgentError('bad_request', `${key} has more than ${opts.max} items`);
  return v as string[];
}

export function stringMap(p: Params, key: string): Record<string, string> | undefined {
  const v = p[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v) || Object.values(v).some((s) => typeof s !== 'string')) {
    throw new AgentError('bad_request', `${key} must be an object of strings`);
  }
  return v as Record<string, string>;
}
