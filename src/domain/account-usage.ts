// What an account uses of its limits (GET /v1/status). Each figure is counted by the rule that
// enforces its limit, so the status never disagrees with a refusal: the instance footprint of the
// create and start checks (L02, L03, L04), live API keys (L05), device keys (L09), webhook
// endpoints, and open SSH tunnels with openings under way (L07).
import type { ApiTokenStore } from '../store/api-tokens';
import type { DeviceKeyStore } from '../store/device-keys';
import type { InstanceStore } from '../store/instances';
import type { WebhookStore } from '../store/webhooks';
import type { Clock } from './clock';
import type { AccountFootprint } from './instance-limits';
import type { SshTunnels } from './ssh-tunnels';

export interface Usage extends AccountFootprint {
  apiTokens: number;
  deviceKeys: number;
  webhooks: number;
  sshTunnels: number;
}

export class AccountUsage {
  constructor(
    private readonly stores: { instances: InstanceStore; apiTokens: ApiTokenStore; deviceKeys: DeviceKeyStore; webhooks: WebhookStore },
    private readonly tunnels: Pick<SshTunnels, 'count'>,
    private readonly clock: Clock,
  ) {}

  async of(accountId: string): Promise<Usage> {
    const [footprint, apiTokens, deviceKeys, webhooks] = await Promise.all([
      this.stores.instances.footprint(accountId),
      this.stores.apiTokens.countActive(accountId, this.clock.now()),
      this.stores.deviceKeys.count(accountId),
      this.stores.webhooks.count(accountId),
    ]);
    return { ...footprint, apiTokens, deviceKeys, webhooks, sshTunnels: this.tunnels.count(accountId) };
  }
}
