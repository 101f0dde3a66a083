// ICE servers for desktop viewers: none without TURN (host candidates only); with TURN, credentials in
// the TURN REST scheme that coturn's use-auth-secret checks (user "<unix expiry>:<session>", password
// base64 HMAC-SHA1 of the user with the shared secret), never the secret itself, good for minutes
// (never past the session); the settings are checked at start. Keys by physical code map to PC
// scancodes.
import { createHmac } from 'node:crypto';
import { ConfigError, loadConfig } from '../../src/config';
import { iceServers, TURN_CREDENTIAL_SECONDS } from '../../src/domain/ice-servers';
import { scancodeOf } from '../../src/media/key-codes';

describe('desktop ICE servers', () => {
  const now = new Date('2026-11-25T10:00:00Z');
  const expiresAt = new Date('2026-11-26T10:00:00Z');
  const turn = { urls: ['turn:turn.example.com:3478', 'turns:turn.example.com:5349'], secret: 's3cret-shared' };

  test('without TURN: no servers', () => {
    expect(iceServers(null, 'session-1', now, expiresAt)).toEqual([]);
  });

  test('with TURN: credentials coturn accepts for ten minutes, not the session\'s day, and not the secret', () => {
    expect(TURN_CREDENTIAL_SECONDS).toBe(600);
    const [server] = iceServers(turn, 'session-1', now, expiresAt);
    expect(server!.urls).toEqual(turn.urls);
    expect(server!.username).toBe(`${now.getTime() / 1000 + 600}:session-1`);
    // What coturn computes on its side from the user name and its static-auth-secret.
    expect(server!.credential).toBe(createHmac('sha1', 's3cret-shared').update(server!.username!).digest('base64'));
    expect(JSON.stringify(server)).not.toContain('s3cret-shared');
  });

  test('with TURN: never past the session\'s end', () => {
    const ending = new Date(now.getTime() + 120_000);
    expect(iceServers(turn, 'session-1', now, ending)[0]!.username).toBe(`${ending.getTime() / 1000}:session-1`);
  });

  test('settings: URLs need the secret and the secret needs URLs; only turn: and turns: URLs', () => {
    const base = { KISTE_DATA_DIR: '/tmp/kiste-config-test' };
    expect(loadConfig(base).turn).toBeNull();
    expect(loadConfig({ ...base, KISTE_TURN_URLS: 'turn:a.example:3478, turns:a.example:5349', KISTE_TURN_SECRET: 'x' }).turn).toEqual({
      urls: ['turn:a.example:3478', 'turns:a.example:5349'], secret: 'x',
    });
    expect(() => loadConfig({ ...base, KISTE_TURN_URLS: 'turn:a.example:3478' })).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, KISTE_TURN_SECRET: 'x' })).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, KISTE_TURN_URLS: 'http://a.example', KISTE_TURN_SECRET: 'x' })).toThrow(/turn: or turns:/);
  });
});

describe('keys by physical code', () => {
  test('letters, digits and modifiers are set-1 scancodes; extended keys carry bit 7; unknown codes are null', () => {
    expect(scancodeOf('KeyA')).toBe(0x1e);
    expect(scancodeOf('Digit1')).toBe(0x02);
    expect(scancodeOf('ShiftLeft')).toBe(0x2a);
    expect(scancodeOf('Period')).toBe(0x34);
    expect(scancodeOf('ArrowUp')).toBe(0xc8);
    expect(scancodeOf('ControlRight')).toBe(0x9d);
    expect(scancodeOf('MetaLeft')).toBe(0xdb);
    expect(scancodeOf('toString')).toBeNull();
    expect(scancodeOf('NoSuchKey')).toBeNull();
  });
});
