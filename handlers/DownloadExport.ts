import type { Handler } from '../src/http/handler';
import { iso, presentApiToken, presentDeviceKey, presentSignIn, presentUser } from './present';

export const handler: Handler<'DownloadExport'> = async ({ auth, services, query }) => {
  const data = await services.accounts.exportData(auth.accountId, query.token);
  return {
    status: 200,
    body: {
      object: 'account_export',
      generated_at: iso(data.generatedAt),
      account: data.account.email,
      control_plane: {
        user: presentUser(data.account),
        sign_ins: data.sessions.map((session) => presentSignIn(session, null)),
        api_tokens: data.apiTokens.map(presentApiToken),
        device_keys: data.deviceKeys.map(presentDeviceKey),
      },
      compute: await services.instances.computeExport(auth.accountId),
    },
  };
};
