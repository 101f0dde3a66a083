import { Link } from '../router';
import { PageHeader } from '../ui/kit';

export function NotFoundPage() {
  return (
    <section>
      <PageHeader title="Page not found" />
      <p>
        The console has no page at this address. <Link href="/">Go to your machines</Link>.
      </p>
    </section>
  );
}
