// Whether this server can start machines now, and if not why: one answer for every start (K09 when
// the host cannot jail them, which no retry mends; K06 while the image is not built; N01 while the
// compute worker cannot be reached), for
// GET /v1/status (the reason and what the operator does) and for /status.json (the public component
// state). A fresh host lacks both for a while: the jail check runs at start, the first image build
// takes minutes.
import { ERRORS } from '../generated/errors';
import { KisteError } from '../errors';
import { cameFromUnreachableHost, type HostChecks, type HostImage, type HostImages, type ImageProfile } from '../compute/machine-host';

export type UnavailableCause = 'isolation' | 'image_building' | 'image_failed' | 'compute_unreachable';

export type MachineAvailability =
  | { available: true; image: HostImage }
  | { available: false; cause: UnavailableCause; reason: string; hint: string };

type AvailabilityHost = Pick<HostChecks, 'isolationProblem'> & Pick<HostImages, 'currentImage' | 'imageBuildState'>;

export class MachineAvailabilityCheck {
  constructor(private readonly host: AvailabilityHost, private readonly profile: ImageProfile) {}

  async now(): Promise<MachineAvailability> {
    let jail: Awaited<ReturnType<HostChecks['isolationProblem']>>;
    try {
      jail = await this.host.isolationProblem();
    } catch (error) {
      if (!cameFromUnreachableHost(error)) throw error;
      return {
        available: false,
        cause: 'compute_unreachable',
        reason: 'The compute worker that runs this server\'s machines does not answer now',
        hint: 'The service starts it again by itself; new machines can start once it answers (ask again in a few seconds).',
      };
    }
    if (jail) return { available: false, cause: 'isolation', reason: `This server cannot run machines isolated from the host: ${jail.reason}`, hint: jail.hint };
    const image = this.host.currentImage(this.profile);
    if (image) return { available: true, image };
    const build = this.host.imageBuildState(this.profile);
    // The step goes into the reason (what is happening now) so that clients waiting on it, like the
    // CLI's create, can show it.
    if (build.state === 'failed') {
      return { available: false, cause: 'image_failed', reason: `The machine image could not be built: ${build.error}`, hint: 'The operator finds the build\'s error in the service log, mends it and restarts kiste, which builds again.' };
    }
    return { available: false, cause: 'image_building', reason: `The machine image is still being built${build.step ? ` (step ${build.step})` : ''}`, hint: ERRORS.K06.hint };
  }

  /** The image a start uses now, or its refusal: K09 (isolation), K06 (no image yet; retryable). */
  async startableImage(): Promise<HostImage> {
    const now = await this.now();
    if (now.available) return now.image;
    if (now.cause === 'isolation') throw new KisteError('K09', { message: now.reason, hint: now.hint });
    if (now.cause === 'compute_unreachable') throw new KisteError('N01', { message: now.reason });
    throw new KisteError('K06', { message: now.reason });
  }
}
