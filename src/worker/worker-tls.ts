// The worker's TLS certificate between hosts: the operator's (KISTE_WORKER_TLS_CERT/KEY) or one made
// once in <data>/worker-tls (self-signed, P-256, ten years). The control plane does not need a CA:
// it pins the certificate on first contact, which the worker names in its signed hello.
import { readPrivateFile } from './worker-secret';
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { X509Certificate } from 'node:crypto';

export interface WorkerCertificate {
  cert: string;
  key: string;
  /** SHA-256 of the DER certificate, as X509Certificate.fingerprint256 prints it. */
  fingerprint: string;
}

export function workerCertificate(settings: { certFile: string | null; keyFile: string | null; generatedDir: string }): WorkerCertificate {
  const [certFile, keyFile] = settings.certFile && settings.keyFile
    ? [settings.certFile, settings.keyFile]
    : generated(settings.generatedDir);
  // Whoever planted a key here could read and alter the streams TLS alone protects: it must be ours alone.
  const key = readPrivateFile(keyFile, 'the worker\'s TLS key');
  const cert = readFileSync(certFile, 'utf8');
  return { cert, key, fingerprint: new X509Certificate(cert).fingerprint256 };
}

export class WorkerCertificateError extends Error {}

/** A folder (not a link) of this user that nobody else may enter. */
function privateFolder(path: string): void {
  const stat = lstatSync(path);
  if (stat.isSymbolicLink()) throw new WorkerCertificateError(`${path} is a symbolic link`);
  if (stat.uid !== process.getuid?.()) throw new WorkerCertificateError(`${path} belongs to another user`);
  if ((stat.mode & 0o077) !== 0) throw new WorkerCertificateError(`${path} may be entered by others (chmod 700 it)`);
}

/** The certificate made on an earlier start, else a new one (written aside and moved into place whole). */
function generated(dir: string): [string, string] {
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  privateFolder(dir);
  if (existsSync(certFile) && existsSync(keyFile)) return [certFile, keyFile];
  const staging = join(dir, `new-${process.pid}`);
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { mode: 0o700 });
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '3650',
    '-subj', '/CN=kiste-worker', '-keyout', join(staging, 'key.pem'), '-out', join(staging, 'cert.pem'),
  ], { stdio: 'ignore', timeout: 30_000 });
  renameSync(join(staging, 'key.pem'), keyFile);
  renameSync(join(staging, 'cert.pem'), certFile);
  rmSync(staging, { recursive: true, force: true });
  return [certFile, keyFile];
}
