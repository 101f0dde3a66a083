// Which alert kinds are e-mailed: one checkbox per kind, saved as soon as it changes. E-mail settings
// never hide alerts from the console or the event stream.
import { useState } from 'preact/hooks';
import { api, ok, type Schemas } from '../../api';
import { ErrorNotice, Loaded, useAction, useLoad } from '../../ui/kit';

type Preferences = Schemas['AlertPreferencesResponse'];

export function AlertPreferences() {
  const preferences = useLoad(() => ok(api.GET('/v1/alerts/preferences')), []);
  const [saved, setSaved] = useState<string | null>(null);
  const save = useAction(async (kind: Schemas['AlertKind'], enabled: boolean) => {
    setSaved(null);
    const answer = await ok(api.PATCH('/v1/alerts/preferences', { body: { [kind]: enabled } }));
    preferences.set(answer);
    const title = answer.data.find((preference) => preference.kind === kind)?.title ?? kind;
    setSaved(`${title}: ${enabled ? 'e-mailed' : 'not e-mailed'} from now on.`);
  });
  return (
    <section aria-labelledby="alert-email" class="panel">
      <h2 id="alert-email">Alert e-mails</h2>
      <Loaded load={preferences}>
        {(settings: Preferences) => (
          <>
            {settings.email_delivery === 'configured' ? (
              <p>
                Alerts of the kinds ticked below are e-mailed to <strong>{settings.email}</strong>.
              </p>
            ) : (
              <p class="notice warning" role="note">
                This kiste installation has no mail relay, so nothing is e-mailed; alerts are still listed above. Your choices
                below apply once the operator sets one up.
              </p>
            )}
            <fieldset>
              <legend>E-mail me about</legend>
              {settings.data.map((preference) => (
                <div class="choice-with-hint" key={preference.kind}>
                  <label class="choice" for={`alert-kind-${preference.kind}`}>
                    <input
                      id={`alert-kind-${preference.kind}`}
                      type="checkbox"
                      checked={preference.enabled}
                      aria-describedby={`alert-kind-${preference.kind}-hint`}
                      onChange={(e) => void save.run(preference.kind, e.currentTarget.checked)}
                    />
                    {preference.title}
                  </label>
                  <p class="hint" id={`alert-kind-${preference.kind}-hint`}>
                    {preference.description}
                  </p>
                </div>
              ))}
            </fieldset>
            <p class="hint" role="status">
              {saved}
            </p>
            <ErrorNotice error={save.error} />
          </>
        )}
      </Loaded>
    </section>
  );
}
