import type { Handler } from '../src/http/handler';
import { consoleShell } from './console-shell';

export const handler: Handler<'ConsolePage'> = async ({ services }) => consoleShell(services);
