import type { Handler } from '../src/http/handler';
import { consoleShell } from './console-shell';

export const handler: Handler<'ConsoleIndex'> = async ({ services }) => consoleShell(services);
