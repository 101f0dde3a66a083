// Who a request to a hosted service is let in as (docs/hosted-services.md "Access account"). A
// public service lets everyone in; a private one what its owner's account brought — a cookie of the
// service's host, an API key, a token — or a CORS preflight as nothing but a preflight. What is not
// let in is answered here: a browser's code traded for the cookie, a page load sent to the console,
// 401 otherwise, 404 for another account's key, 403 for a cookie sent from another site's page.
import type { IncomingMessage } from 'node:http';
import type { HostedServices } from '../domain/hosted-services';
import { SERVICE_COOKIE_SECONDS, type Admission, type PresentedCredentials, type ServiceAccessGate } from '../domain/service-access';
import { KisteError } from '../errors';
import { isNavigation } from './service-proxy-answers';
import { AUTH_PATH, crossSiteUse, isPreflight, presentedCredentials, queryOf, serviceCookie } from './service-proxy-access';
import type { Recheck } from './service-proxy-connections';

export type Resolved = NonNullable<Awaited<ReturnType<HostedServices['resolve']>>>;

/** How a request that is not let in is answered: an error, or (a page load) a redirect. */
export interface Answer {
  refuse(error: KisteError): void;
  redirect?(location: string, cookie?: string): void;
}

/** Let in (with how to tell later whether it still is), or a preflight to carry as one. */
export type Admitted = { kind: 'in'; recheck: Recheck } | { kind: 'preflight' };

export class ServiceAdmission {
  constructor(
    private readonly services: HostedServices,
    private readonly access: ServiceAccessGate,
    /** Where a browser is sent to be let into a private service. */
    private readonly consoleUrl: string,
  ) {}

  /** Whether the request is let in; null when it was answered instead. */
  async admit(req: IncomingMessage, key: string, resolved: Resolved, path: string, upgrade: boolean, answer: Answer): Promise<Admitted | null> {
    const { service } = resolved;
    if (service.access === 'public') return { kind: 'in', recheck: this.recheck(key, service.id, { cookies: [] }, 'none') };
    const addresses = this.services.publishedIn!;
    const pathname = path.split('?')[0];
    if (!upgrade && pathname === AUTH_PATH && answer.redirect && req.method === 'GET' && this.access.browsersLetIn) {
      const traded = await this.access.trade(service, queryOf(path).get('code') ?? '').catch(() => null);
      if (!traded) {
        answer.refuse(new KisteError('A01', { message: 'This sign-in link for the service has expired or was used', hint: 'Open the service\'s address again.' }));
        return null;
      }
      answer.redirect(`${resolved.pathPrefix}${traded.returnTo}`, serviceCookie(addresses, resolved.pathPrefix, traded.cookie, SERVICE_COOKIE_SECONDS));
      return null;
    }
    const presented = presentedCredentials(req, addresses);
    const admission = await this.access.admit(service, presented).catch(() => 'none' as const);
    if (admission === 'cookie' && crossSiteUse(req, new URL(resolved.publicUrl).origin)) {
      answer.refuse(new KisteError('A15', { message: 'A page of another site cannot use this private service with its visitor\'s sign-in' }));
      return null;
    }
    if (admission === 'cookie' || admission === 'token' || admission === 'key') return { kind: 'in', recheck: this.recheck(key, service.id, presented, admission) };
    if (admission === 'foreign') {
      answer.refuse(new KisteError('S10', { message: 'No service is published at this address' }));
      return null;
    }
    if (!upgrade && isPreflight(req)) return { kind: 'preflight' };
    if (answer.redirect && (req.method === 'GET' || req.method === 'HEAD') && isNavigation(req)) {
      if (!this.access.browsersLetIn) {
        answer.refuse(new KisteError('S14'));
        return null;
      }
      const query = new URLSearchParams({ service: service.id, return: path, state: this.access.stateFor(service.id, path) });
      answer.redirect(`${this.consoleUrl.replace(/\/$/, '')}/console/services/authorize?${query}`);
      return null;
    }
    answer.refuse(new KisteError('A01', { message: 'This service is private to its account', hint: 'Sign in to kiste in this browser and open its address, or send an API key of its account (Authorization: Bearer).' }));
    return null;
  }

  /** Whether a connection let in as `admission` still would be: the same service, public, or what it brought still lets it in. */
  private recheck(key: string, serviceId: string, presented: PresentedCredentials, admission: Admission): Recheck {
    return async () => {
      const now = await this.services.resolve(key);
      if (!now || now.service.id !== serviceId) return false;
      if (now.service.access === 'public') return true;
      return this.access.stillAdmits(now.service, presented, admission);
    };
  }
}
