import type { Handler } from '../src/http/handler';
import { iso } from './present';

export const handler: Handler<'GetPlatformStatus'> = async ({ services }) => {
  const report = await services.platform.report();
  return {
    status: 200,
    body: {
      object: 'platform_status',
      status: report.components.every((component) => component.status === 'operational') ? 'operational' : 'degraded',
      updated_at: iso(report.checkedAt),
      components: report.components,
      uptime_7d_percent: report.uptime7dPercent,
      incidents: [],
      maintenance: [],
      open_signup: services.config.openSignup,
    },
    headers: { 'cache-control': 'no-cache' },
  };
};
