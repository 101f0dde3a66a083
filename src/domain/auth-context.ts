// Who is calling: the account and the credential used. Built by the HTTP layer, used by services.
export type CredentialKind = 'browser' | 'cli' | 'api_key';

export interface AuthContext {
  accountId: string;
  kind: CredentialKind;
  /** Session id (browser, cli) or API key id. */
  credentialId: string;
}
