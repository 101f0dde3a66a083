// Who is calling: the account and the credential used. Built by the HTTP layer, used by services.
import type { Account } from '../store/accounts';

export type CredentialKind = 'browser' | 'cli' | 'api_key';

export interface AuthContext {
  accountId: string;
  kind: CredentialKind;
  /** Session id (browser, cli) or API key id. */
  credentialId: string;
  /** The account as read when the credential was checked (at most CREDENTIAL_CACHE_TTL_MS old). */
  account: Account;
}
