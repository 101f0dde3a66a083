import { desktop } from './desktop';
import { desktopLite } from './desktop-lite';
import { minimal } from './minimal';
import type { Profile } from './types';

export type { DisplaySpec, ImageFile, Profile } from './types';

/** Every image kiste can build, by name. */
export const PROFILES: Readonly<Record<string, Profile>> = { minimal, desktop, 'desktop-lite': desktopLite };

export function getProfile(name: string): Profile {
  const profile = Object.prototype.hasOwnProperty.call(PROFILES, name) ? PROFILES[name] : undefined;
  if (!profile) throw new Error(`unknown image profile "${name}" (known: ${Object.keys(PROFILES).join(', ')})`);
  return profile;
}
