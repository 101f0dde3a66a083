// The minimal console pages the service serves itself until the full console exists: password
// sign-in and the CLI approval. Plain HTML with a little inline script that calls the API.
const STYLE = `body{font:16px system-ui,sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem;color:#222}
label{display:block;margin:.75rem 0 .25rem}input{width:100%;padding:.5rem;font:inherit;box-sizing:border-box}
button{margin-top:1rem;padding:.5rem 1.25rem;font:inherit;cursor:pointer}#error{color:#b00020;min-height:1.5rem}
code{background:#f3f3f3;padding:0 .25rem}`;

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** A JSON value safe to place inside an inline <script>. */
function scriptJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/&/g, '\\u0026');
}

function page(title: string, body: string, script: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${escapeHtml(title)} · kiste</title><style>${STYLE}</style></head><body>${body}<script>${script}</script></body></html>`;
}

/** Only same-origin paths are followed after sign-in (no open redirect). */
export function safeContinue(target: string | undefined): string {
  return target && target.startsWith('/') && !target.startsWith('//') && !target.startsWith('/\\') ? target : '/console/login?signed_in=1';
}

export function loginPage(continueTo: string): string {
  return page(
    'Sign in',
    `<h1>Sign in to kiste</h1><form id="f"><label for="email">E-mail</label><input id="email" name="email" type="email" autocomplete="username" required>
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button><p id="error" role="alert"></p></form>`,
    `const next=${scriptJson(continueTo)};
document.getElementById('f').addEventListener('submit',async(e)=>{e.preventDefault();
const r=await fetch('/v1/auth/login',{method:'POST',headers:{'content-type':'application/json'},credentials:'same-origin',
body:JSON.stringify({email:document.getElementById('email').value,password:document.getElementById('password').value})});
if(r.ok){location.assign(next);return;}
const b=await r.json().catch(()=>null);document.getElementById('error').textContent=b&&b.error?b.error.message:'Sign-in failed';});`,
  );
}

export function approvePage(request: Record<string, string>, csrf: string, email: string): string {
  const device = request.device ? ` on <code>${escapeHtml(request.device)}</code>` : '';
  return page(
    'Approve CLI sign-in',
    `<h1>Approve CLI sign-in</h1><p>The kiste command line${device} asks to act as <strong>${escapeHtml(email)}</strong>.</p>
<p>Client <code>${escapeHtml(request.client_id ?? '')}</code>, returning to <code>${escapeHtml(request.redirect_uri ?? '')}</code>.</p>
<button id="approve">Approve</button> <button id="deny">Deny</button><p id="error" role="alert"></p>`,
    `const request=${scriptJson(request)};const csrf=${scriptJson(csrf)};
async function decide(decision){const r=await fetch('/oauth/authorize',{method:'POST',credentials:'same-origin',
headers:{'content-type':'application/json','x-csrf-token':csrf},body:JSON.stringify({...request,decision})});
const b=await r.json().catch(()=>null);if(r.ok&&b){location.assign(b.redirect_to);return;}
document.getElementById('error').textContent=b&&b.error?b.error.message:'Approval failed';}
document.getElementById('approve').onclick=()=>decide('approve');document.getElementById('deny').onclick=()=>decide('deny');`,
  );
}

export function errorDocPage(entry: { code: string; type: string; status: number; message: string; hint: string; retryable: boolean }): string {
  return page(
    `Error ${entry.code}`,
    `<h1>Error ${escapeHtml(entry.code)}: <code>${escapeHtml(entry.type)}</code></h1>
<p>HTTP status <strong>${entry.status}</strong>. ${entry.retryable ? 'The same request may succeed later.' : 'Repeating the same request will not help.'}</p>
<h2>What it means</h2><p>${escapeHtml(entry.message)}</p><h2>What to do</h2><p>${escapeHtml(entry.hint)}</p>`,
    '',
  );
}
