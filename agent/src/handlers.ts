// The method table (hello lives in the session: it gates all the others).
import { execCancel, execSignal, execStart } from './exec';
import { metrics } from './metrics';
import { personalise } from './personalise';
import type { Readiness } from './readiness';
import type { Handler } from './session';
import { setTime, shutdown, syncFilesystems } from './system';
import { tcpOpen } from './tcp';

export function createHandlers(readiness: Readiness): Record<string, Handler> {
  return {
    ready: () => readiness.check(),
    'exec.start': execStart,
    'exec.signal': execSignal,
    'exec.cancel': execCancel,
    metrics: (params, ctx) => metrics(params, ctx.config),
    personalise: (params, ctx) => personalise(params, ctx.config, ctx.log),
    'tcp.open': tcpOpen,
    'time.set': (params, ctx) => setTime(params, ctx.config),
    'fs.sync': (_params, ctx) => syncFilesystems(ctx.config),
    shutdown: (params, ctx) => shutdown(params, ctx.config, ctx.log),
  };
}
