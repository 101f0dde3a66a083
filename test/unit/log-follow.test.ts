// newLogText: what `kiste logs -f` prints after each poll of a moving tail of the console log.
import { lastLines, newLogText } from '../../cli/log-follow';

describe('newLogText', () => {
  test('the first answer is printed whole; an unchanged one adds nothing', () => {
    expect(newLogText('', 'a\nb\n')).toBe('a\nb\n');
    expect(newLogText('a\nb\n', 'a\nb\n')).toBe('');
  });
  test('lines appended to the same window', () => {
    expect(newLogText('a\nb\n', 'a\nb\nc\n')).toBe('c\n');
  });
  test('the window moved: older lines dropped at the front, new ones at the end', () => {
    expect(newLogText('a\nb\nc\n', 'b\nc\nd\ne\n')).toBe('d\ne\n');
    expect(newLogText('line 1\nline 2\nline 3\n', 'line 3\nline 4\n')).toBe('line 4\n');
  });
  test('no overlap at all (more output than the window between polls): all of it', () => {
    expect(newLogText('a\nb\n', 'x\ny\n')).toBe('x\ny\n');
  });

  test('lastLines keeps the newest lines', () => {
    expect(lastLines('a\nb\nc\n', 2)).toBe('b\nc\n');
    expect(lastLines('a\nb', 5)).toBe('a\nb');
  });
});
