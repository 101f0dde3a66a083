import { apiKeyFor, bearer, browserFor, createAccount, startTestService, TestService } from '../support/harness';

describe('smoke', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(() => t.close());

  it('answers /v1/me for an API key and a browser session', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    const me = await t.api.get('/v1/me').set(bearer(key)).expect(200);
    expect(me.body.email).toBe(account.email);
    const browser = await browserFor(t, account);
    const viaCookie = await t.api.get('/v1/me').set('cookie', browser.cookie).expect(200);
    expect(viaCookie.body.id).toBe(account.id);
  });

  it('answers unknown routes with the envelope', async () => {
    const res = await t.api.get('/v1/nothing-here').expect(404);
    expect(res.body.error.code).toBe('P05');
  });
});
