// The error documentation page (GET /docs/errors/{code}): plain HTML without script, linked from every
// error envelope's doc_url.
const STYLE = `body{font:16px system-ui,sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem;color:#222}
code{background:#f3f3f3;padding:0 .25rem}`;

function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

function page(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${escapeHtml(title)} · kiste</title><style>${STYLE}</style></head><body>${body}</body></html>`;
}

export function errorDocPage(entry: { code: string; type: string; status: number; message: string; hint: string; retryable: boolean }): string {
  return page(
    `Error ${entry.code}`,
    `<h1>Error ${escapeHtml(entry.code)}: <code>${escapeHtml(entry.type)}</code></h1>
<p>HTTP status <strong>${entry.status}</strong>. ${entry.retryable ? 'The same request may succeed later.' : 'Repeating the same request will not help.'}</p>
<h2>What it means</h2><p>${escapeHtml(entry.message)}</p><h2>What to do</h2><p>${escapeHtml(entry.hint)}</p>`,
  );
}

/** A page kiste answers in a published service's place (the service is unknown, private, stopped or not listening). */
export function servicePage(title: string, message: string, hint: string): string {
  return page(title, `<h1>${escapeHtml(title)}</h1><p>${escapeHtml(message)}</p><p>${escapeHtml(hint)}</p>`);
}
