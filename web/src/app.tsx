// The console's frame: the session decides between the signed-out pages (sign-in, sign-up) and the
// signed-in layout with its navigation; the address decides the page.
import type { ComponentChildren } from 'preact';
import { useEffect } from 'preact/hooks';
import { go, Link, navigate, safeContinue, useLocation, type Location } from './router';
import { SessionProvider, useSession } from './session';
import { ErrorNotice, Loading } from './ui/kit';
import { SignInPage, SignUpPage } from './pages/sign-in';
import { ApprovePage } from './pages/approve';
import { ServiceAuthorizePage } from './pages/service-authorize';
import { HomePage } from './pages/home';
import { CreateMachinePage } from './pages/create-machine';
import { MachinePage } from './pages/machine';
import { ImagePage, ImagesPage } from './pages/images';
import { EnvironmentPage, EnvironmentsPage } from './pages/environments';
import { ApiKeysPage } from './pages/api-keys';
import { DeviceKeysPage } from './pages/device-keys';
import { WebhooksPage, WebhookPage } from './pages/webhooks';
import { SnapshotsPage } from './pages/snapshots';
import { EventsPage } from './pages/events';
import { AlertsPage } from './pages/alerts';
import { SignInsPage } from './pages/sign-ins';
import { AccountPage } from './pages/account';
import { NotFoundPage } from './pages/not-found';
import { DesktopViewerPage } from './desktop/viewer-page';
import { setAsideReference } from './desktop/link-reference';

export function App() {
  return (
    <SessionProvider>
      <Root />
    </SessionProvider>
  );
}

const SIGNED_OUT_PAGES = new Set(['/console/login', '/console/signup']);
/** Where desktop links open: the viewer fills the window, without the console's navigation. */
const DESKTOP_PATH = '/desktop';

function Root() {
  const { session } = useSession();
  const location = useLocation();
  const signedOutPage = SIGNED_OUT_PAGES.has(location.path);

  useEffect(() => {
    // Signed in already: the sign-in page goes straight on.
    if (session.state === 'signed-in' && signedOutPage) go(safeContinue(location.query.get('continue')));
    // Signed out anywhere else: to sign-in, coming back here afterwards.
    if (session.state === 'signed-out' && !signedOutPage) {
      if (location.path === DESKTOP_PATH) setAsideReference(); // the link's reference is in the fragment, which sign-in would lose
      const here = location.path + (location.query.size ? `?${location.query}` : '');
      navigate(`/console/login${here === '/' ? '' : `?continue=${encodeURIComponent(here)}`}`, { replace: true });
    }
  }, [session.state, signedOutPage, location.path]);

  if (session.state === 'loading') return <Loading label="Opening the console…" />;
  if (session.state === 'failed') return <main class="narrow"><ErrorNotice error={session.error} title="The console could not reach the service." /></main>;
  if (signedOutPage && session.state !== 'signed-in') {
    return <main class="narrow">{location.path === '/console/signup' ? <SignUpPage /> : <SignInPage reason={session.state === 'signed-out' ? session.reason : undefined} />}</main>;
  }
  if (session.state !== 'signed-in') return <Loading />;
  if (location.path === DESKTOP_PATH) return <DesktopViewerPage />;
  return <SignedIn location={location} />;
}

const NAVIGATION: { href: string; label: string }[] = [
  { href: '/', label: 'Machines' },
  { href: '/console/images', label: 'Images' },
  { href: '/console/environments', label: 'Environments' },
  { href: '/console/snapshots', label: 'Snapshots' },
  { href: '/console/keys', label: 'API keys' },
  { href: '/console/device-keys', label: 'Device keys' },
  { href: '/console/webhooks', label: 'Webhooks' },
  { href: '/console/events', label: 'Events' },
  { href: '/console/alerts', label: 'Alerts' },
  { href: '/console/sign-ins', label: 'Sign-ins' },
  { href: '/console/account', label: 'Account' },
];

function SignedIn({ location }: { location: Location }) {
  const { session, signOut } = useSession();
  const email = session.state === 'signed-in' ? session.user.email : '';
  const section = location.path === '/' ? '/' : location.path.split('/').slice(0, 3).join('/');
  const active = location.path.startsWith('/console/machines/') || location.path === '/console/new' ? '/' : section;
  return (
    <div class="layout">
      <a class="skip" href="#main">Skip to content</a>
      <header class="topbar">
        <Link href="/" class="brand" aria-label="kiste home">
          kiste
        </Link>
        <nav aria-label="Main">
          <ul>
            {NAVIGATION.map((item) => (
              <li key={item.href}>
                <Link href={item.href} aria-current={active === item.href ? 'page' : undefined}>
                  {item.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div class="who">
          <span class="email" title={email}>{email}</span>
          <button type="button" class="button plain" onClick={() => void signOut().then(() => navigate('/console/login', { replace: true }))}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <Page location={location} />
      </main>
    </div>
  );
}

/** A path segment as text; a malformed %-escape stays as it is (the page then says "not found"). */
function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

function Page({ location }: { location: Location }): ComponentChildren {
  const [, , page, item] = location.path.split('/').map(safeDecode);
  if (location.path === '/') return <HomePage />;
  switch (page) {
    case 'new':
      return <CreateMachinePage key={location.query.get('snapshot') ?? ''} snapshotId={location.query.get('snapshot')} />;
    case 'snapshots':
      return <SnapshotsPage />;
    case 'machines':
      return item ? <MachinePage key={item} name={item} tab={location.query.get('tab')} /> : <HomePage />;
    case 'images':
      return item ? <ImagePage key={item} id={item} /> : <ImagesPage />;
    case 'environments':
      return item ? <EnvironmentPage key={item} name={item} /> : <EnvironmentsPage />;
    case 'oauth':
      return item === 'approve' ? <ApprovePage query={location.query} /> : <NotFoundPage />;
    case 'services':
      return item === 'authorize' ? <ServiceAuthorizePage query={location.query} /> : <NotFoundPage />;
    case 'keys':
      return <ApiKeysPage />;
    case 'device-keys':
      return <DeviceKeysPage />;
    case 'webhooks':
      return item ? <WebhookPage key={item} id={item} /> : <WebhooksPage />;
    case 'events':
      return <EventsPage query={location.query} />;
    case 'alerts':
      return <AlertsPage />;
    case 'sign-ins':
      return <SignInsPage />;
    case 'account':
      return <AccountPage />;
    default:
      return <NotFoundPage />;
  }
}
