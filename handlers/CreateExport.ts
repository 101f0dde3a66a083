import type { Handler } from '../src/http/handler';
import { iso } from './present';

export const handler: Handler<'CreateExport'> = async ({ auth, services }) => {
  const { token, expiresAt } = await services.accounts.createExportLink(auth.accountId);
  return {
    status: 201,
    body: {
      object: 'account_export_link',
      url: `${services.config.baseUrl}/v1/me/export/download?token=${encodeURIComponent(token)}`,
      expires_at: iso(expiresAt),
      message: 'Download the export within ten minutes, signed in to this account.',
    },
  };
};
