// OAuth 2.0 Authorization Code with PKCE (S256 only) for the CLI. Redirect URIs must be loopback
// (any port, exact path); codes are single use, short-lived and bound to challenge, client and
// redirect URI. The token is a CLI sign-in.
import { KisteError } from '../errors';
import type { OAuthCodeStore } from '../store/oauth-codes';
import type { Clock } from './clock';
import { newId, newToken, sha256Base64Url, sha256Hex, TOKEN_PREFIX } from './secrets';
import type { ClientInfo, SignIn } from './sign-in';
import type { Transactions } from './transactions';

const CODE_LIFETIME_MS = 120_000;
const CLIENT_ID = /^[A-Za-z0-9._-]{1,64}$/;
const PKCE_CHALLENGE = /^[A-Za-z0-9_-]{43}$/; // base64url of a SHA-256
const PKCE_VERIFIER = /^[A-Za-z0-9._~-]{43,128}$/;

export interface AuthorizationRequest {
  response_type?: string;
  client_id?: string;
  redirect_uri?: string;
  code_challenge?: string;
  code_challenge_method?: string;
  state?: string;
  device?: string;
}

export interface ValidAuthorization {
  clientId: string;
  redirectUri: string;
  codeChallenge: string;
  state: string | null;
  device: string | null;
}

function isLoopbackRedirect(value: string): boolean {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return false;
  }
  return (
    url.protocol === 'http:' &&
    ['127.0.0.1', '[::1]', 'localhost'].includes(url.hostname) &&
    url.username === '' && url.password === '' && url.hash === ''
  );
}

export function validateAuthorization(request: AuthorizationRequest): ValidAuthorization {
  if (request.response_type !== 'code') throw new KisteError('A20', { message: 'response_type must be "code"', param: 'response_type' });
  if (!request.client_id || !CLIENT_ID.test(request.client_id)) throw new KisteError('A20', { message: 'client_id is missing or malformed', param: 'client_id' });
  if (!request.redirect_uri || !isLoopbackRedirect(request.redirect_uri)) {
    throw new KisteError('A22', { message: 'redirect_uri must be an http loopback address (127.0.0.1, [::1] or localhost)', param: 'redirect_uri' });
  }
  if (request.code_challenge_method !== 'S256') throw new KisteError('A23', { param: 'code_challenge_method' });
  if (!request.code_challenge || !PKCE_CHALLENGE.test(request.code_challenge)) {
    throw new KisteError('A20', { message: 'code_challenge must be the base64url SHA-256 of the verifier (43 characters)', param: 'code_challenge' });
  }
  if (request.state !== undefined && request.state.length > 512) throw new KisteError('A20', { message: 'state is too long', param: 'state' });
  return {
    clientId: request.client_id,
    redirectUri: request.redirect_uri,
    codeChallenge: request.code_challenge,
    state: request.state ?? null,
    device: request.device ? request.device.slice(0, 100) : null,
  };
}

function withQuery(uri: string, values: Record<string, string | null>): string {
  const url = new URL(uri);
  for (const [name, value] of Object.entries(values)) if (value !== null) url.searchParams.set(name, value);
  return url.toString();
}

export class OAuth {
  constructor(
    private readonly transactions: Transactions,
    private readonly codes: OAuthCodeStore,
    private readonly signIn: SignIn,
    private readonly clock: Clock,
  ) {}

  /** The approving browser's decision; answers where the browser goes next. */
  async decide(accountId: string, request: AuthorizationRequest, approve: boolean): Promise<string> {
    const valid = validateAuthorization(request);
    if (!approve) return withQuery(valid.redirectUri, { error: 'access_denied', state: valid.state });
    const code = newToken(TOKEN_PREFIX.oauthCode);
    await this.codes.create({
      id: newId(),
      accountId,
      codeHash: sha256Hex(code),
      clientId: valid.clientId,
      redirectUri: valid.redirectUri,
      codeChallenge: valid.codeChallenge,
      device: valid.device,
      createdAt: this.clock.now(),
      expiresAt: new Date(this.clock.now().getTime() + CODE_LIFETIME_MS),
    });
    return withQuery(valid.redirectUri, { code, state: valid.state });
  }

  async exchange(request: { client_id: string; code: string; code_verifier: string; redirect_uri: string }, client: ClientInfo): Promise<{ token: string; sessionId: string; expiresInSeconds: number }> {
    const now = this.clock.now();
    const grant = await this.codes.findByHash(sha256Hex(request.code));
    const invalidGrant = (message: string, param: string) => new KisteError('A21', { message, param });
    if (grant?.usedAt) {
      // A code presented twice may have been stolen: the sign-in it was exchanged for ends too (RFC 6749 §4.1.2).
      if (grant.sessionId) await this.signIn.revoke(grant.accountId, grant.sessionId).catch(() => undefined);
      throw invalidGrant('The authorization code is unknown, used or expired', 'code');
    }
    if (!grant || grant.expiresAt <= now) throw invalidGrant('The authorization code is unknown, used or expired', 'code');
    if (grant.clientId !== request.client_id) throw invalidGrant('client_id does not match the authorization', 'client_id');
    if (grant.redirectUri !== request.redirect_uri) throw invalidGrant('redirect_uri does not match the authorization', 'redirect_uri');
    if (!PKCE_VERIFIER.test(request.code_verifier) || sha256Base64Url(request.code_verifier) !== grant.codeChallenge) {
      throw invalidGrant('code_verifier does not match the code_challenge', 'code_verifier');
    }
    const consumed = await this.transactions.run((tx) => this.codes.consume(tx, grant.id, now));
    if (!consumed) throw invalidGrant('The authorization code is unknown, used or expired', 'code');
    const { session, token } = await this.signIn.startSession(grant.accountId, 'cli', client, grant.device);
    await this.codes.recordSession(grant.id, session.id);
    return { token, sessionId: session.id, expiresInSeconds: Math.floor((session.expiresAt.getTime() - now.getTime()) / 1000) };
  }
}
