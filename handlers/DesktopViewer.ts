import type { Handler } from '../src/http/handler';
import { consoleShell } from './console-shell';

export const handler: Handler<'DesktopViewer'> = async ({ services }) => consoleShell(services);
