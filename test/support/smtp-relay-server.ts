// A real SMTP server for the tests, run as its own process (see smtp-relay.ts): the `smtp-server`
// package on loopback, plain SMTP (no STARTTLS), with AUTH PLAIN/LOGIN required when
// SMTP_RELAY_USER is set. Every message it accepts is written to stdout as one JSON line:
// {"event":"message","auth":…,"envelope":{"from","to"},"headers":{…},"text":…}, after
// {"event":"listening","port":…} once it listens. Recipients containing SMTP_RELAY_REJECT are
// refused with a permanent 550.
//
//   SMTP_RELAY_PORT=2525 SMTP_RELAY_USER=u SMTP_RELAY_PASS=p tsx test/support/smtp-relay-server.ts
import { SMTPServer } from 'smtp-server';

const port = Number(process.env.SMTP_RELAY_PORT ?? 0);
const user = process.env.SMTP_RELAY_USER;
const pass = process.env.SMTP_RELAY_PASS ?? '';
const reject = process.env.SMTP_RELAY_REJECT;

function emit(line: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

/** RFC 2047 encoded words (=?charset?Q|B?…?=) in a header value. */
function decodeWords(value: string): string {
  return value.replace(/=\?([^?]+)\?([QqBb])\?([^?]*)\?=\s*(?==\?)?/g, (_, _charset: string, encoding: string, text: string) =>
    encoding.toUpperCase() === 'B'
      ? Buffer.from(text, 'base64').toString('utf8')
      : Buffer.from(text.replace(/_/g, ' ').replace(/=([0-9A-Fa-f]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))), 'latin1').toString('utf8'),
  );
}

function decodeBody(body: string, encoding: string | undefined): string {
  switch ((encoding ?? '7bit').toLowerCase()) {
    case 'quoted-printable':
      return Buffer.from(body.replace(/=\r?\n/g, '').replace(/=([0-9A-Fa-f]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))), 'latin1').toString('utf8');
    case 'base64':
      return Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8');
    default:
      return body;
  }
}

/** A single-part message (what the service sends): its headers (lower-case names) and decoded text. */
function parse(raw: string): { headers: Record<string, string>; text: string } {
  const split = raw.indexOf('\r\n\r\n');
  const head = split === -1 ? raw : raw.slice(0, split);
  const body = split === -1 ? '' : raw.slice(split + 4);
  const headers: Record<string, string> = {};
  for (const line of head.replace(/\r\n[ \t]+/g, ' ').split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = decodeWords(line.slice(colon + 1).trim());
  }
  return { headers, text: decodeBody(body, headers['content-transfer-encoding']).replace(/\r\n/g, '\n') };
}

const server = new SMTPServer({
  disabledCommands: user ? ['STARTTLS'] : ['STARTTLS', 'AUTH'],
  authOptional: !user,
  allowInsecureAuth: true,
  logger: false,
  onAuth(auth, _session, callback) {
    if (auth.username === user && auth.password === pass) callback(null, { user: auth.username });
    else callback(Object.assign(new Error('Invalid username or password'), { responseCode: 535 }));
  },
  onRcptTo(address, _session, callback) {
    if (reject && address.address.includes(reject)) callback(Object.assign(new Error(`Mailbox ${address.address} unavailable`), { responseCode: 550 }));
    else callback();
  },
  onData(stream, session, callback) {
    const chunks: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', () => {
      const message = parse(Buffer.concat(chunks).toString('utf8'));
      emit({
        event: 'message',
        auth: session.user ?? null,
        envelope: {
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : null,
          to: session.envelope.rcptTo.map((rcpt) => rcpt.address),
        },
        ...message,
      });
      callback();
    });
  },
});

server.on('error', (error) => process.stderr.write(`smtp relay error: ${error.message}\n`));
server.listen(port, '127.0.0.1', () => {
  emit({ event: 'listening', port: (server.server.address() as { port: number }).port });
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
