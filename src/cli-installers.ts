// The installer scripts /install.sh and /install.ps1 serve: they install the CLI bundle
// (/downloads/kiste.js) and a `kiste` launcher that defaults to this service. Node.js does the
// download itself (it is needed to run the CLI anyway), so no curl or wget is assumed.
import { shellQuote } from './shell-quote';

/** POSIX sh. KISTE_PREFIX (default ~/.local) receives lib/kiste/kiste.js and bin/kiste. */
export function installShellScript(baseUrl: string): string {
  const base = shellQuote(baseUrl);
  return `#!/bin/sh
# kiste CLI installer for ${baseUrl}
#   curl -fsSL ${baseUrl}/install.sh | sh        (KISTE_PREFIX=DIR to install elsewhere than ~/.local)
set -eu
BASE=${base}
PREFIX="\${KISTE_PREFIX:-$HOME/.local}"
if ! command -v node >/dev/null 2>&1; then
  echo "kiste: the CLI runs on Node.js 18 or newer, and node is not on PATH (https://nodejs.org)" >&2
  exit 1
fi
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)'; then
  echo "kiste: the CLI needs Node.js 18 or newer; this is $(node --version)" >&2
  exit 1
fi
mkdir -p "$PREFIX/lib/kiste" "$PREFIX/bin"
echo "kiste: downloading the CLI from $BASE"
node -e '
const [url, file] = process.argv.slice(1);
fetch(url).then(async (res) => {
  if (!res.ok) throw new Error("HTTP " + res.status + " from " + url);
  require("fs").writeFileSync(file, Buffer.from(await res.arrayBuffer()), { mode: 0o644 });
}).catch((error) => { console.error("kiste: download failed: " + error.message); process.exit(1); });
' "$BASE/downloads/kiste.js" "$PREFIX/lib/kiste/kiste.js.part"
mv "$PREFIX/lib/kiste/kiste.js.part" "$PREFIX/lib/kiste/kiste.js"
cat > "$PREFIX/bin/kiste" <<LAUNCHER
#!/bin/sh
KISTE_DEFAULT_URL=\\\${KISTE_DEFAULT_URL:-$BASE} exec node "$PREFIX/lib/kiste/kiste.js" "\\$@"
LAUNCHER
chmod 755 "$PREFIX/bin/kiste"
echo "kiste: installed $("$PREFIX/bin/kiste" --version) as $PREFIX/bin/kiste"
case ":$PATH:" in
  *":$PREFIX/bin:"*) ;;
  *) echo "kiste: add $PREFIX/bin to PATH to run it as kiste" ;;
esac
echo "kiste: next, sign in with: kiste login"
`;
}

/** PowerShell. KISTE_PREFIX (default %LOCALAPPDATA%\\kiste) receives kiste.js and kiste.cmd. */
export function installPowerShellScript(baseUrl: string): string {
  const base = baseUrl.replace(/'/g, "''");
  return `# kiste CLI installer for ${baseUrl}
#   irm ${baseUrl}/install.ps1 | iex        ($env:KISTE_PREFIX to install elsewhere)
$ErrorActionPreference = 'Stop'
$Base = '${base}'
$Prefix = if ($env:KISTE_PREFIX) { $env:KISTE_PREFIX } else { Join-Path $env:LOCALAPPDATA 'kiste' }
$node = Get-Command node -ErrorAction SilentlyContinue
if (-not $node) { throw 'kiste: the CLI runs on Node.js 18 or newer, and node is not on PATH (https://nodejs.org)' }
$major = [int]((& node -p 'process.versions.node.split(".")[0]').Trim())
if ($major -lt 18) { throw "kiste: the CLI needs Node.js 18 or newer; this is $(& node --version)" }
New-Item -ItemType Directory -Force -Path $Prefix | Out-Null
Write-Host "kiste: downloading the CLI from $Base"
Invoke-WebRequest -UseBasicParsing -Uri "$Base/downloads/kiste.js" -OutFile (Join-Path $Prefix 'kiste.js.part')
Move-Item -Force (Join-Path $Prefix 'kiste.js.part') (Join-Path $Prefix 'kiste.js')
Set-Content -Encoding ASCII -Path (Join-Path $Prefix 'kiste.cmd') -Value @"
@echo off
if not defined KISTE_DEFAULT_URL set KISTE_DEFAULT_URL=$Base
node "%~dp0kiste.js" %*
"@
Write-Host "kiste: installed $(& (Join-Path $Prefix 'kiste.cmd') --version) as $(Join-Path $Prefix 'kiste.cmd')"
if (-not (($env:PATH -split ';') -contains $Prefix)) { Write-Host "kiste: add $Prefix to PATH to run it as kiste" }
Write-Host 'kiste: next, sign in with: kiste login'
`;
}
