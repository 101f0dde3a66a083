// Quoting for POSIX shell command lines: QEMU's exec: migration URIs, mmdebstrap hooks, the QEMU
// command in its log, the installer script, the ssh ProxyCommand.

/** Always single-quoted. */
export function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/** As it is when the shell would read it unchanged (readable logs and commands), else single-quoted. */
export function shellWord(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : shellQuote(value);
}
