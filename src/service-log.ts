// The service's log. A person reading a terminal gets one readable line per entry (pino-pretty: time
// of day, level, message, then the fields); anything else (journald, a pipe, a log shipper, the tests)
// gets pino's JSON, one object per line. KISTE_LOG_FORMAT=pretty|json overrides the guess.
import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';

export type LogFormat = 'auto' | 'pretty' | 'json';

export function createServiceLogger(level: string, format: LogFormat, stream: NodeJS.WriteStream = process.stdout): Logger {
  const readable = format === 'pretty' || (format === 'auto' && stream.isTTY === true);
  if (!readable) return pino({ level }, stream);
  return pino(
    { level },
    pretty({
      destination: stream,
      sync: true, // nothing is lost when the process exits right after a line (shutdown, start failures)
      colorize: stream.isTTY === true && !process.env.NO_COLOR,
      translateTime: 'SYS:HH:MM:ss',
      ignore: 'pid,hostname',
      singleLine: true,
    }),
  );
}
