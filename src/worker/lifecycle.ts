import type { WorkerOptions } from '@temporalio/worker';
import { DEFAULT_EFFECT_TIMEOUT_MS } from '../protocol/wire.js';

/**
 * Worker options that make deploys and cancels page nobody:
 * - `shutdownGraceTime` = the longer of the TTL and the effect activity's default
 *   `startToCloseTimeout` (5 minutes): a shutdown lets a running apply finish (and record
 *   `done`) instead of aborting it into `uncertain`. An apply may outlast the TTL (the lease is
 *   renewed while it runs), but not its activity's timeout. A shutdown ends as soon as the
 *   running applies do; this is only its upper bound.
 * - heartbeat throttle = TTL/3: the activity's lease heartbeat reaches Temporal every
 *   TTL/3, and a cancel request rides back on that answer, so a cancel reaches apply's
 *   `signal` within about one TTL (Temporal's default throttle is up to 60 s).
 * Options the host sets itself win.
 */
export function lifecycleDefaults(
  ttlMs: number,
): Pick<
  WorkerOptions,
  'shutdownGraceTime' | 'maxHeartbeatThrottleInterval' | 'defaultHeartbeatThrottleInterval'
> {
  const throttle = Math.max(1, Math.floor(ttlMs / 3));
  return {
    shutdownGraceTime: Math.max(ttlMs, DEFAULT_EFFECT_TIMEOUT_MS),
    maxHeartbeatThrottleInterval: throttle,
    defaultHeartbeatThrottleInterval: throttle,
  };
}
