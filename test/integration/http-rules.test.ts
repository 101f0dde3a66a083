// Cross-cutting HTTP rules of every endpoint (service-api.md "Format rules", "Errors", "Limits"):
// request ids, routing errors, body parsing and validation, body limits, request budgets,
// operations not implemented yet, error documentation pages and unexpected failures.
import { generateKeyPairSync } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import request, { type Response } from 'supertest';
import { ERRORS, ErrorCode } from '../../src/generated/errors';
import { OPERATIONS, OperationMeta } from '../../src/generated/operations';
import { KisteError } from '../../src/errors';
import { validateBody } from '../../src/http/validation';
import type { Clock } from '../../src/domain/clock';
import {
  apiKeyFor,
  bearer,
  cliTokenFor,
  createAccount,
  startTestService,
  TEST_PASSWORD,
  TestService,
} from '../support/harness';

const operations = Object.values(OPERATIONS) as OperationMeta[];
const operation = (id: keyof typeof OPERATIONS) => OPERATIONS[id] as OperationMeta;

/** Asserts an error answer: status and code from the registry, docs_url and request_id as the rules say. */
function expectError(t: TestService, res: Response, code: ErrorCode): Response['body']['error'] {
  const definition = ERRORS[code];
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status: definition.status, code });
  const error = res.body.error;
  expect(error.type).toBe(definition.type);
  expect(error.retryable).toBe(definition.retryable);
  expect(error.docs_url).toBe(`${t.config.baseUrl}/docs/errors/${code}`);
  expect(error.request_id).toBe(res.headers['x-request-id']);
  return error;
}

/** A JSON text padded with trailing whitespace (still one valid document) to exactly `size` bytes. */
function jsonOfSize(value: unknown, size: number): string {
  const text = JSON.stringify(value);
  const length = Buffer.byteLength(text);
  if (length > size) throw new Error(`body already ${length} bytes, more than ${size}`);
  return text + ' '.repeat(size - length);
}

/** A fresh ed25519 key as one OpenSSH public key line. */
function openSshEd25519(comment: string): string {
  const { publicKey } = generateKeyPairSync('ed25519');
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x!, 'base64url');
  const field = (data: Buffer) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    return Buffer.concat([length, data]);
  };
  const blob = Buffer.concat([field(Buffer.from('ssh-ed25519')), field(raw)]);
  return `ssh-ed25519 ${blob.toString('base64')} ${comment}`;
}

/** A clock frozen half-way through the current minute, so a per-minute window cannot roll over mid-test. */
function frozenClock(): Clock & { at: Date } {
  const minute = Math.floor(Date.now() / 60_000) * 60_000;
  const at = new Date(minute + 30_000);
  return { at, now: () => new Date(at) };
}

describe('HTTP rules', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(() => t.close());

  describe('x-request-id', () => {
    it('is on every answer, success and error, and error bodies repeat it', async () => {
      const ok = await t.api.get('/healthz').expect(200);
      expect(ok.headers['x-request-id']).toMatch(/^[A-Za-z0-9._:@-]{1,128}$/);
      const error = await t.api.get('/v1/me').expect(401);
      expect(error.headers['x-request-id']).toMatch(/^[A-Za-z0-9._:@-]{1,128}$/);
      expectError(t, error, 'A01');
      expect(ok.headers['x-request-id']).not.toBe(error.headers['x-request-id']);
    });

    it("keeps a client's safe value and repeats it as error.request_id", async () => {
      const id = 'abc-123.X_y:z';
      const ok = await t.api.get('/healthz').set('x-request-id', id).expect(200);
      expect(ok.headers['x-request-id']).toBe(id);
      const error = await t.api.get('/v1/nothing-here').set('x-request-id', id).expect(404);
      expect(error.headers['x-request-id']).toBe(id);
      expect(error.body.error.request_id).toBe(id);
      const longest = 'r'.repeat(128);
      const kept = await t.api.get('/v1/me').set('x-request-id', longest).expect(401);
      expect(kept.body.error.request_id).toBe(longest);
    });

    it.each([
      ['a space', 'abc def'],
      ['markup', '<script>alert(1)</script>'],
      ['a quote', 'id"1'],
      ['129 characters', 'a'.repeat(129)],
    ])('replaces an unsafe value (%s)', async (_what, offered) => {
      const res = await t.api.get('/v1/me').set('x-request-id', offered).expect(401);
      const replaced = res.headers['x-request-id'];
      expect(replaced).not.toBe(offered);
      expect(replaced).toMatch(/^[A-Za-z0-9._:@-]{1,128}$/);
      expect(res.body.error.request_id).toBe(replaced);
    });
  });

  describe('routing', () => {
    it('answers an unknown route with 404 P05', async () => {
      expectError(t, await t.api.get('/v1/nothing-here'), 'P05');
      expectError(t, await t.api.post('/v1/me/nothing/deeper').send({}), 'P05');
      expectError(t, await t.api.get('/not-an-api-path'), 'P05');
    });

    it.each(['/v1/me', '/v1/api-tokens', '/v1/device-keys', '/healthz', '/v1/auth/login'])(
      'answers a wrong method on %s with 405 P06 and an Allow header listing its methods',
      async (path) => {
        const declared = operations.filter((op) => op.path === path).map((op) => op.method);
        expect(declared.length).toBeGreaterThan(0);
        const wrong = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].find((method) => !declared.includes(method))!;
        const res = await t.api[wrong.toLowerCase() as 'get' | 'post' | 'put' | 'patch' | 'delete'](path);
        expectError(t, res, 'P06');
        const allow = String(res.headers.allow ?? '').split(',').map((method) => method.trim()).filter(Boolean);
        expect(allow.sort()).toEqual([...declared].sort());
      },
    );

    it('answers a path with a malformed %-escape with 400 P01, not a server error', async () => {
      const key = await apiKeyFor(t, await createAccount(t));
      for (const path of ['/v1/api-tokens/%', '/v1/api-tokens/%zz', '/v1/device-keys/%E0%A4', '/v1/instances/%FF/metrics', '/v1/nothing/%']) {
        expectError(t, await t.api.get(path).set(bearer(key)), 'P01');
      }
      // well-formed escapes still reach the operation (here: an id that is not a UUID)
      expect(expectError(t, await t.api.get('/v1/api-tokens/a%20b').set(bearer(key)), 'P01').param).toBe('id');
    });

    it('lists the methods of a templated path in Allow', async () => {
      const template = operation('GetApiToken').path;
      const declared = operations.filter((op) => op.path === template).map((op) => op.method);
      const res = await t.api.patch('/v1/api-tokens/8f14e45f-ceea-467f-a0e1-6b1c1e4f4f11');
      expectError(t, res, 'P06');
      expect(String(res.headers.allow).split(',').map((m) => m.trim()).sort()).toEqual([...declared].sort());
    });
  });

  describe('request bodies', () => {
    it('answers malformed JSON with 400 P02', async () => {
      for (const text of ['{"email": ', '{email: "x"}', '[1,2', "{'a':1}", '{"a":1}}']) {
        const res = await t.api.post('/v1/auth/login').set('content-type', 'application/json').send(text);
        expectError(t, res, 'P02');
      }
    });

    it('answers an unsupported Content-Type with 415 P04', async () => {
      const account = await createAccount(t);
      const login = JSON.stringify({ email: account.email, password: TEST_PASSWORD });
      expectError(t, await t.api.post('/v1/auth/login').set('content-type', 'text/plain').send(login), 'P04');
      expectError(t, await t.api.post('/v1/auth/login').set('content-type', 'application/xml').send('<a/>'), 'P04');
      // form encoding is accepted by /oauth/token only
      const cli = await cliTokenFor(t, account);
      const res = await t.api
        .post('/v1/api-tokens')
        .set(bearer(cli))
        .set('content-type', 'application/x-www-form-urlencoded')
        .send('label=x&expires_in_seconds=600');
      expectError(t, res, 'P04');
    });

    it('answers schema violations with 400 P01 naming the field', async () => {
      const account = await createAccount(t);
      const cli = await cliTokenFor(t, account);
      const cases: Array<[string, unknown, string]> = [
        ['missing field', { email: account.email }, 'password'],
        ['wrong type', { email: 42, password: TEST_PASSWORD }, 'email'],
        ['unknown field', { email: account.email, password: TEST_PASSWORD, remember_me: true }, 'remember_me'],
      ];
      for (const [what, body, param] of cases) {
        const error = expectError(t, await t.api.post('/v1/auth/login').send(body as object), 'P01');
        expect({ what, param: error.param }).toEqual({ what, param });
        expect(error.message).toContain(param);
      }
      const tooShort = await t.api.post('/v1/api-tokens').set(bearer(cli)).send({ label: 'k', expires_in_seconds: 299 });
      expect(expectError(t, tooShort, 'P01').param).toBe('expires_in_seconds');
      const notObject = await t.api.post('/v1/api-tokens').set(bearer(cli)).send([{ label: 'k' }]);
      expect(expectError(t, notObject, 'P01').param).toBeNull();
      const badPathParam = await t.api.get('/v1/api-tokens/not-a-uuid').set(bearer(cli));
      expect(expectError(t, badPathParam, 'P01').param).toBe('id');
    });

    it('names a nested field in param (spec validators used by the pipeline)', () => {
      // No implemented operation has a nested request body yet (those answer P09 before validation),
      // so this checks the validation step the pipeline runs on a nested schema directly.
      const failure = (() => {
        try {
          validateBody('CreateEnvironment', { name: 'env', variables: { GOOD: 'x', BAD: 5 } });
        } catch (error) {
          return error;
        }
        return null;
      })();
      expect(failure).toBeInstanceOf(KisteError);
      expect((failure as KisteError).code).toBe('P01');
      expect((failure as KisteError).details.param).toBe('variables.BAD');
    });
  });

  describe('body limits', () => {
    it('refuses a body just over 64 KiB on a /v1 JSON endpoint with 413 P03 and accepts one of exactly 64 KiB', async () => {
      const limit = operation('CreateApiToken').bodyLimit!;
      expect(limit).toBe(64 * 1024);
      const cli = await cliTokenFor(t, await createAccount(t));
      const body = { label: 'limit', expires_in_seconds: 600 };
      const over = await t.api.post('/v1/api-tokens').set(bearer(cli)).set('content-type', 'application/json').send(jsonOfSize(body, limit + 1));
      expectError(t, over, 'P03');
      const at = await t.api.post('/v1/api-tokens').set(bearer(cli)).set('content-type', 'application/json').send(jsonOfSize(body, limit));
      expect(at.status).toBe(200);
      expect(at.body.data.label).toBe('limit');
    });

    it('refuses a body just over 8 KiB on sign-in, OAuth token and device keys, not one of exactly 8 KiB', async () => {
      const account = await createAccount(t);
      const key = await apiKeyFor(t, account);
      const login = { email: account.email, password: TEST_PASSWORD };
      const token = {
        client_id: 'kiste-cli',
        code: 'no-such-code',
        code_verifier: 'v'.repeat(43),
        redirect_uri: 'http://127.0.0.1:9/callback',
        grant_type: 'authorization_code',
      };
      const cases: Array<[keyof typeof OPERATIONS, string, Record<string, string>, unknown]> = [
        ['Login', '/v1/auth/login', {}, login],
        ['OAuthToken', '/oauth/token', {}, token],
        ['AddDeviceKey', '/v1/device-keys', bearer(key), { name: 'laptop', public_key: openSshEd25519('me@laptop') }],
      ];
      for (const [id, path, headers, body] of cases) {
        const limit = operation(id).bodyLimit!;
        expect({ id, limit }).toEqual({ id, limit: 8 * 1024 });
        const over = await t.api.post(path).set(headers).set('content-type', 'application/json').send(jsonOfSize(body, limit + 1));
        expectError(t, over, 'P03');
        const at = await t.api.post(path).set(headers).set('content-type', 'application/json').send(jsonOfSize(body, limit));
        expect({ id, status: at.status, code: at.body?.error?.code }).not.toEqual(expect.objectContaining({ status: 413 }));
        if (id !== 'OAuthToken') expect({ id, status: at.status }).toEqual({ id, status: 200 });
      }
    });

    it('refuses an over-size body sent without Content-Length (chunked) with 413 P03', async () => {
      const server = t.app.listen(0, '127.0.0.1');
      await new Promise((resolve) => server.once('listening', resolve));
      try {
        const { port } = server.address() as AddressInfo;
        const answer = await new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
          const req = httpRequest(
            { host: '127.0.0.1', port, method: 'POST', path: '/v1/auth/login', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } },
            (res) => {
              let body = '';
              res.setEncoding('utf8');
              res.on('data', (chunk) => (body += chunk));
              res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
            },
          );
          req.on('error', reject);
          const chunk = ' '.repeat(1024);
          for (let i = 0; i < 9; i++) req.write(chunk);
          req.end('{}');
        });
        expect(answer.status).toBe(413);
        const envelope = JSON.parse(answer.body);
        expect(envelope.error.code).toBe('P03');
        expect(envelope.error.request_id).toBe(answer.headers['x-request-id']);
      } finally {
        await new Promise((resolve) => server.close(resolve));
      }
    });
  });

  describe('operations not implemented yet', () => {
    it.each([
      ['GET', '/v1/billing', 'GetBilling'],
      ['GET', '/v1/billing/invoices', 'ListInvoices'],
    ] as const)('%s %s answers 501 P09 signed in and 401 A01 without credentials', async (method, path, id) => {
      expect(operation(id).implemented).toBe(false);
      const key = await apiKeyFor(t, await createAccount(t));
      const verb = method.toLowerCase() as 'get' | 'post';
      expectError(t, await t.api[verb](path).set(bearer(key)), 'P09');
      expectError(t, await t.api[verb](path), 'A01');
    });
  });

  describe('error documentation', () => {
    // The pages are text/html; the harness's contract check (t.api) treats every declared response
    // schema as JSON, so these requests go through supertest directly and check the page here.
    const getPage = async (path: string) => {
      const res = await request(t.app).get(path);
      expect({ path, status: res.status }).toEqual({ path, status: 200 });
      expect(res.headers['x-request-id']).toBeTruthy();
      expect(res.headers['content-type']).toMatch(/^text\/html/);
      return res;
    };

    it('serves GET <base>/docs/errors/<code> as HTML for every registered code', async () => {
      for (const code of Object.keys(ERRORS) as ErrorCode[]) {
        const docsUrl = new URL(`${t.config.baseUrl}/docs/errors/${code}`);
        const page = await getPage(docsUrl.pathname);
        expect(page.text).toContain(code);
        expect(page.text).toContain(ERRORS[code].type);
      }
    });

    it('links each error answer to that page', async () => {
      const res = await t.api.get('/v1/me').expect(401);
      const docsUrl = new URL(expectError(t, res, 'A01').docs_url);
      expect(docsUrl.origin).toBe(new URL(t.config.baseUrl).origin);
      const page = await getPage(docsUrl.pathname);
      expect(page.text).toContain(ERRORS.A01.type);
    });

    it('answers an unknown code with an error, not a page', async () => {
      const res = await t.api.get('/docs/errors/Z99');
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
    });
  });
});

describe('request budgets', () => {
  it('answers the request after the per-minute budget with 429 L01 and Retry-After; other accounts are unaffected', async () => {
    const clock = frozenClock();
    const t = await startTestService({ env: { KISTE_REQUESTS_PER_MINUTE: '5' }, clock });
    try {
      const budget = t.services.limits.budget('default');
      expect(budget).toBe(5);
      const keyA = await apiKeyFor(t, await createAccount(t));
      const keyB = await apiKeyFor(t, await createAccount(t));
      for (let i = 0; i < budget; i++) await t.api.get('/v1/me').set(bearer(keyA)).expect(200);
      const refused = await t.api.get('/v1/me').set(bearer(keyA));
      const error = expectError(t, refused, 'L01');
      expect(error.retryable).toBe(true);
      const retryAfter = String(refused.headers['retry-after']);
      expect(retryAfter).toMatch(/^\d+$/);
      const windowEnd = Math.floor(clock.at.getTime() / 60_000) * 60_000 + 60_000;
      expect(Number(retryAfter)).toBe(Math.ceil((windowEnd - clock.at.getTime()) / 1000));
      expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
      // still refused, on another operation too: the budget is per account, not per endpoint
      expectError(t, await t.api.get('/v1/api-tokens').set(bearer(keyA)), 'L01');
      await t.api.get('/v1/me').set(bearer(keyB)).expect(200);
    } finally {
      await t.close();
    }
  });

  it('limits GET /v1/instances/{name}/metrics to 40 a minute, whatever the answer (here 404 K01)', async () => {
    const clock = frozenClock();
    const t = await startTestService({ clock });
    try {
      const metrics = operation('GetInstanceMetrics');
      expect(metrics.rateBudget).toBe('metrics');
      const perMinute = t.services.limits.budget('metrics');
      expect(perMinute).toBe(40);
      const key = await apiKeyFor(t, await createAccount(t));
      for (let i = 0; i < perMinute; i++) expectError(t, await t.api.get('/v1/instances/xy/metrics').set(bearer(key)), 'K01');
      const refused = await t.api.get('/v1/instances/xy/metrics').set(bearer(key));
      expectError(t, refused, 'L01');
      expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      // the default budget is separate: other endpoints still answer
      await t.api.get('/v1/me').set(bearer(key)).expect(200);
    } finally {
      await t.close();
    }
  });
});

describe('unexpected failures', () => {
  it('answer 500 P10 without a stack trace or internal message', async () => {
    const t = await startTestService();
    try {
      const account = await createAccount(t);
      const usedKey = await apiKeyFor(t, account);
      const freshKey = await apiKeyFor(t, account); // never presented before the failure
      await t.api.get('/v1/me').set(bearer(usedKey)).expect(200);
      await t.services.database.close();
      // GET /v1/me must read the fresh key; listing keys reads the database whatever is cached
      const answers = [await t.api.get('/v1/me').set(bearer(freshKey)), await t.api.get('/v1/api-tokens').set(bearer(usedKey))];
      for (const res of answers) {
        const error = expectError(t, res, 'P10');
        expect(error.retryable).toBe(true);
        expect(error.message).toBe(`${ERRORS.P10.message} (code: P10)`);
        expect(error.hint).toBe(ERRORS.P10.hint);
        const text = res.text;
        expect(text).not.toMatch(/\bat .+:\d+:\d+/); // no "at fn (file:line:col)" stack frames
        expect(text).not.toMatch(/\n\s+at /);
        expect(text).not.toMatch(/prisma/i);
        expect(text).not.toMatch(/sqlite|postgres|pool|connection/i);
      }
    } finally {
      await t.close().catch(() => undefined); // the database was closed on purpose above
    }
  });
});
