import type { WorkerOptions } from '@temporalio/worker';

/**
 * Worker options that make deploys and cancels page nobody, derived from the lease TTL:
 * - `shutdownGraceTime` = the TTL: a shutdown lets a running apply finish (and record
 *   `done`) instead of aborting it into `uncertain`. Raise it to your longest apply.
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
    shutdownGraceTime: ttlMs,
    maxHeartbeatThrottleInterval: throttle,
    defaultHeartbeatThrottleInterval: throttle,
  };
}
