// The rules an environment manifest must meet before anything is stored: paths that stay plain
// absolute paths, clone URLs git reads as URLs (no file://, no options, no credentials), refs that
// are names, no NUL bytes; updates keep what they leave out.
import { KisteError } from '../../src/errors';
import { checkEnvironment, checkGuestPath, checkRepositoryUrl, defaultCheckoutPath, type EnvironmentInput } from '../../src/domain/environment-rules';

function refusal(run: () => unknown): { code: string; param: string | null | undefined; message: string } {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(KisteError);
    const e = error as KisteError;
    return { code: e.code, param: e.details.param, message: e.message };
  }
  throw new Error('expected a refusal');
}

const secret = (path: string, text = 'token') => ({ path, content_base64: Buffer.from(text).toString('base64') });

describe('environment rules', () => {
  it.each([
    ['relative', 'etc/secret'],
    ['traversal', '/root/../etc/shadow'],
    ['dot segment', '/root/./x'],
    ['empty segment', '/root//x'],
    ['trailing slash', '/root/x/'],
    ['root itself', '/'],
    ['kernel tree', '/proc/self/mem'],
    ['device', '/dev/sda'],
    ['shell characters', '/root/$(reboot)'],
    ['space', '/root/my file'],
    ['NUL', '/root/a\0b'],
  ])('refuses a secret path that is %s', (_why, path) => {
    const r = refusal(() => checkEnvironment({ secret_files: [secret(path)] }));
    expect(r).toMatchObject({ code: 'K32', param: 'secret_files[0].path' });
  });

  it.each([
    ['file://', 'file:///etc/passwd'],
    ['an option', '--upload-pack=touch /tmp/pwned'],
    ['an option after a dash', '-uhttps://example.com/x.git'],
    ['ext::', 'ext::sh -c touch% /tmp/pwned'],
    ['a local path', '/srv/repo.git'],
    ['a relative path', '../repo'],
    ['credentials', 'https://user:token@example.com/x.git'],
    ['a user name over https', 'https://user@example.com/x.git'],
    ['whitespace', 'https://example.com/x.git --upload-pack=x'],
    ['a NUL byte', 'https://example.com/x\0.git'],
    ['an ssh password', 'ssh://git:pw@example.com/x.git'],
    ['a token in the query', 'https://example.com/x.git?access_token=abc'],
    ['a fragment', 'https://example.com/x.git#main'],
    ['an ssh user name that is an option', 'ssh://-oProxyCommand=x@example.com/x.git'],
  ])('refuses a repository URL with %s', (_why, url) => {
    const r = refusal(() => checkEnvironment({ repositories: [{ url }] }));
    expect(r).toMatchObject({ code: 'K32', param: 'repositories[0].url' });
  });

  it('accepts https, http, git, ssh and scp-like URLs', () => {
    expect(checkRepositoryUrl('https://example.com/team/app.git', 'u')).toBe('http');
    expect(checkRepositoryUrl('http://10.1.2.3:8080/app.git', 'u')).toBe('http');
    expect(checkRepositoryUrl('git://example.com/app.git', 'u')).toBe('git');
    expect(checkRepositoryUrl('ssh://git@example.com:2222/app.git', 'u')).toBe('ssh');
    expect(checkRepositoryUrl('git@example.com:team/app.git', 'u')).toBe('ssh');
  });

  it.each(['--orphan', 'a..b', 'main branch', 'x.lock', 'feature//x'])('refuses the ref %j', (ref) => {
    expect(refusal(() => checkEnvironment({ repositories: [{ url: 'https://example.com/a.git', ref }] }))).toMatchObject({ code: 'K32', param: 'repositories[0].ref' });
  });

  it('fills default checkout paths and refuses two checkouts in one place', () => {
    expect(defaultCheckoutPath('https://example.com/team/app.git')).toBe('/root/app');
    expect(defaultCheckoutPath('git@example.com:team/tool')).toBe('/root/tool');
    const content = checkEnvironment({ repositories: [{ url: 'https://example.com/team/app.git', ref: 'v1.2' }] });
    expect(content.repositories).toEqual([{ url: 'https://example.com/team/app.git', ref: 'v1.2', path: '/root/app', credentials_file: null }]);
    const r = refusal(() => checkEnvironment({ repositories: [{ url: 'https://a.example/app.git' }, { url: 'https://b.example/app.git' }] }));
    expect(r).toMatchObject({ code: 'K32', param: 'repositories[1].path' });
    expect(refusal(() => checkEnvironment({ repositories: [{ url: 'https://a.example/app.git', path: 'src/app' }] }))).toMatchObject({ param: 'repositories[0].path' });
  });

  it('refuses a secret file inside a checkout (git clones only into an empty folder)', () => {
    const r = refusal(() => checkEnvironment({ secret_files: [secret('/root/app/.env')], repositories: [{ url: 'https://example.com/app.git' }] }));
    expect(r).toMatchObject({ code: 'K32', param: 'repositories[0].path' });
  });

  it('takes clone credentials only from one of its secret files', () => {
    const ok = checkEnvironment({
      secret_files: [secret('/root/.git-credentials', 'https://u:t@example.com')],
      repositories: [{ url: 'https://example.com/a.git', credentials_file: '/root/.git-credentials' }],
    });
    expect(ok.repositories[0].credentials_file).toBe('/root/.git-credentials');
    expect(refusal(() => checkEnvironment({ repositories: [{ url: 'https://example.com/a.git', credentials_file: '/root/.netrc' }] })))
      .toMatchObject({ code: 'K32', param: 'repositories[0].credentials_file' });
    expect(refusal(() => checkEnvironment({ secret_files: [secret('/root/k')], repositories: [{ url: 'git://example.com/a.git', credentials_file: '/root/k' }] })))
      .toMatchObject({ code: 'K32', param: 'repositories[0].credentials_file' });
  });

  it('refuses duplicate secret paths, bad base64 and NUL bytes in values and scripts', () => {
    expect(refusal(() => checkEnvironment({ secret_files: [secret('/root/a'), secret('/root/a')] }))).toMatchObject({ param: 'secret_files[1].path' });
    expect(refusal(() => checkEnvironment({ secret_files: [{ path: '/root/a', content_base64: 'not base64!' }] }))).toMatchObject({ param: 'secret_files[0].content_base64' });
    expect(refusal(() => checkEnvironment({ variables: { A: 'x\0y' } }))).toMatchObject({ code: 'K32', param: 'variables.A' });
    expect(refusal(() => checkEnvironment({ setup_script: 'echo\0' }))).toMatchObject({ code: 'K32', param: 'setup_script' });
  });

  it('keeps what an update leaves out and replaces what it gives', () => {
    const first = checkEnvironment({ secret_files: [secret('/root/token', 's3cret')], variables: { A: '1' }, setup_script: 'echo one', repositories: [{ url: 'https://example.com/a.git' }] });
    const update: EnvironmentInput = { variables: { B: '2' } };
    const second = checkEnvironment(update, first);
    expect(second.variables).toEqual({ B: '2' });
    expect(second.secretFiles.map((f) => [f.path, f.content.toString()])).toEqual([['/root/token', 's3cret']]);
    expect(second.setupScript).toBe('echo one');
    expect(second.repositories).toEqual(first.repositories);
    expect(checkEnvironment({ secret_files: [] }, first).secretFiles).toEqual([]);
  });

  it('accepts plain absolute paths, also in a home directory', () => {
    expect(checkGuestPath('/home/kiste/.config/app/token.json', 'p')).toBe('/home/kiste/.config/app/token.json');
  });
});
