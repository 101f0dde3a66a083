// build.ts replaces __KISTE_AGENT_VERSION__ with "<package version>+<hash of the sources>".
declare const __KISTE_AGENT_VERSION__: string | undefined;

export const AGENT_VERSION: string = typeof __KISTE_AGENT_VERSION__ === 'string' ? __KISTE_AGENT_VERSION__ : '0.0.0-dev';
