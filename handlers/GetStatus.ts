import type { Handler } from '../src/http/handler';

export const handler: Handler<'GetStatus'> = async ({ auth, services }) => {
  const { limits } = services;
  const usage = await services.accountUsage.of(auth.accountId);
  const machines = await services.instances.availability.now();
  return {
    status: 200,
    body: {
      object: 'status',
      status: machines.available ? 'ok' : 'degraded',
      version: services.config.version,
      limits: {
        machines: limits.machines,
        running_machines: limits.runningMachines,
        vcpu_per_machine: limits.vcpuPerMachine,
        memory_mib_per_machine: limits.memoryMibPerMachine,
        disk_mib_total: limits.diskMibTotal,
        api_tokens: limits.apiTokens,
        device_keys: limits.deviceKeys,
        webhooks: limits.webhooks,
        ssh_tunnels: services.sshTunnels.perAccount,
        requests_per_minute: limits.requestsPerMinute,
        metrics_per_minute: limits.metricsPerMinute,
      },
      usage: {
        machines: usage.machines,
        running_machines: usage.runningMachines,
        disk_mib: usage.diskMib,
        api_tokens: usage.apiTokens,
        device_keys: usage.deviceKeys,
        webhooks: usage.webhooks,
        ssh_tunnels: usage.sshTunnels,
      },
      features: {
        native_exec_stream: true,
        command_interrupt: true,
        event_watch: true, // GET /v1/events with wait_ms
        hosted_http: false,
        hosted_websocket: false,
        snapshots: true,
        snapshot_storage_mode: 'local',
        remote_snapshot_pull: false,
        accelerator: services.machineHost.accelerator,
        open_signup: services.config.openSignup,
      },
      machines: machines.available
        ? { available: true, cause: null, reason: null, hint: null }
        : { available: false, cause: machines.cause, reason: machines.reason, hint: machines.hint },
    },
  };
};
