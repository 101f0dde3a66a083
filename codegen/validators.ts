// Emits standalone ajv validators (JSON Schema 2020-12 + ajv-formats) for every operation:
//   validators-params.js: path and query parameters, with type coercion (they arrive as strings);
//   validators-bodies.js: request bodies and every JSON response, strict (no coercion).
// Export names: `<OperationId>__params`, `<OperationId>__body`, `<OperationId>__<status>`.
import Ajv2020, { Options } from 'ajv/dist/2020';
import standaloneCode from 'ajv/dist/standalone';
import addFormats from 'ajv-formats';
import { BANNER, OpenApiDocument, operationsOf, resolveRef } from './spec';

const COMPONENTS_ID = 'kiste';
const OPENAPI_ONLY_KEYWORDS = ['example', 'discriminator', 'xml', 'externalDocs'];

/** Rewrites `#/components/schemas/X` to the shared components schema and drops x-* extensions. */
function portable(node: any): any {
  if (Array.isArray(node)) return node.map(portable);
  if (!node || typeof node !== 'object') return node;
  const out: any = {};
  for (const [key, value] of Object.entries(node)) {
    if (key.startsWith('x-')) continue;
    if (key === '$ref' && typeof value === 'string' && value.startsWith('#/components/schemas/')) {
      out.$ref = `${COMPONENTS_ID}#/$defs/${value.slice('#/components/schemas/'.length)}`;
    } else {
      out[key] = portable(value);
    }
  }
  return out;
}

function newAjv(options: Options): Ajv2020 {
  const ajv = new Ajv2020({
    allErrors: false,
    strict: false,
    allowUnionTypes: true,
    code: { source: true },
    ...options,
  });
  addFormats(ajv);
  for (const keyword of OPENAPI_ONLY_KEYWORDS) ajv.addKeyword(keyword);
  ajv.addSchema({ $id: COMPONENTS_ID, $defs: portable(doc_.components.schemas) });
  return ajv;
}

let doc_: OpenApiDocument;

function parameterSchema(doc: OpenApiDocument, op: ReturnType<typeof operationsOf>[number]) {
  const groups: Record<string, { type: 'object'; properties: Record<string, unknown>; required: string[] }> = {
    path: { type: 'object', properties: {}, required: [] },
    query: { type: 'object', properties: {}, required: [] },
  };
  const parameters = [...(op.pathItem.parameters ?? []), ...(op.operation.parameters ?? [])].map((p) => resolveRef(doc, p));
  for (const parameter of parameters) {
    const group = groups[parameter.in];
    if (!group) continue; // headers and cookies are read by the framework itself
    group.properties[parameter.name] = portable(parameter.schema ?? {});
    if (parameter.required || parameter.in === 'path') group.required.push(parameter.name);
  }
  return { type: 'object', properties: groups, required: ['path', 'query'] };
}

/** The schema of a JSON-like body: JSON, or the form encoding that carries the same fields. */
function jsonSchemaOf(content: Record<string, any> | undefined): unknown | undefined {
  if (!content) return undefined;
  const media = content['application/json'] ?? content['application/x-www-form-urlencoded'];
  return media?.schema ? portable(media.schema) : undefined;
}

/**
 * `namedSchemas`: components schemas exported under their own names (the one every error answer
 * has; messages a stream carries, which no operation's body names).
 */
export function renderValidators(doc: OpenApiDocument, namedSchemas: readonly string[] = ['ErrorResponse']): { params: string; bodies: string } {
  doc_ = doc;
  const paramsAjv = newAjv({ coerceTypes: true, useDefaults: true });
  const bodiesAjv = newAjv({});
  const paramExports: Record<string, string> = {};
  const bodyExports: Record<string, string> = {};
  for (const op of operationsOf(doc)) {
    const id = op.operationId;
    paramsAjv.addSchema(parameterSchema(doc, op), `${id}__params`);
    paramExports[`${id}__params`] = `${id}__params`;
    const body = jsonSchemaOf(resolveRef(doc, op.operation.requestBody)?.content);
    if (body) {
      bodiesAjv.addSchema(body as object, `${id}__body`);
      bodyExports[`${id}__body`] = `${id}__body`;
    }
    for (const [status, response] of Object.entries<any>(op.operation.responses ?? {})) {
      const lineSchema = resolveRef(doc, response)?.content?.['application/x-ndjson']?.schema;
      if (lineSchema) {
        // A stream of JSON lines: each line is checked on its own.
        bodiesAjv.addSchema(portable(lineSchema), `${id}__${status}__line`);
        bodyExports[`${id}__${status}__line`] = `${id}__${status}__line`;
      }
      const schema = jsonSchemaOf(resolveRef(doc, response)?.content);
      if (!schema) continue;
      const name = `${id}__${status}`;
      bodiesAjv.addSchema(schema as object, name);
      bodyExports[name] = name;
    }
  }
  for (const name of namedSchemas) {
    bodiesAjv.addSchema({ $ref: `${COMPONENTS_ID}#/$defs/${name}` }, name);
    bodyExports[name] = name;
  }
  const header = `/* eslint-disable */\n${BANNER}`;
  return {
    params: header + standaloneCode(paramsAjv, paramExports),
    bodies: header + standaloneCode(bodiesAjv, bodyExports),
  };
}

export const VALIDATORS_DTS = `${BANNER}
import type { ValidateFunction } from 'ajv';
declare const validators: Record<string, ValidateFunction | undefined>;
export = validators;
`;
