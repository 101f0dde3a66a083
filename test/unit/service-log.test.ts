// The service's log format: readable lines for a person at a terminal, JSON lines for everything
// else (and the tests that read the service's output), KISTE_LOG_FORMAT to choose.
import { Writable } from 'node:stream';
import { createServiceLogger, type LogFormat } from '../../src/service-log';

/** What the logger writes for one entry, on a stream that is or is not a terminal. */
async function written(format: LogFormat, tty: boolean): Promise<string> {
  let text = '';
  const stream = new Writable({
    write(chunk, _encoding, done) {
      text += String(chunk);
      done();
    },
  }) as unknown as NodeJS.WriteStream;
  stream.isTTY = tty;
  createServiceLogger('info', format, stream).info({ profile: 'minimal', seconds: 734.2 }, 'image build 2/7 root filesystem: done in 734.2 s');
  await new Promise((resolve) => setImmediate(resolve));
  return text;
}

describe('service log', () => {
  it('is readable on a terminal: time, level, message, fields on one line, no pid or host name', async () => {
    const line = await written('auto', true);
    expect(() => JSON.parse(line)).toThrow();
    // eslint-disable-next-line no-control-regex
    const plain = line.replace(/\u001b\[\d+m/g, '');
    expect(plain).toMatch(/^\[\d\d:\d\d:\d\d\] INFO: image build 2\/7 root filesystem: done in 734\.2 s \{"profile":"minimal","seconds":734\.2\}\n$/);
  });

  it('is JSON lines elsewhere, and as chosen', async () => {
    expect(JSON.parse(await written('auto', false))).toMatchObject({ level: 30, msg: 'image build 2/7 root filesystem: done in 734.2 s', profile: 'minimal' });
    expect(JSON.parse(await written('json', true))).toMatchObject({ profile: 'minimal' });
    const pretty = await written('pretty', false);
    expect(pretty).toMatch(/^\[\d\d:\d\d:\d\d\] INFO: image build/); // no colours off a terminal
  });
});
