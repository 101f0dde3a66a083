/** The CLI's version: the package's. */
export const CLI_VERSION: string = (require('../package.json') as { version: string }).version;
