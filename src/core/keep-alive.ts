import { FenceStaleError, LeaseLostError, StoreUnavailableError } from './errors.js';
import type { Store } from './store.js';
import type { Action, Lease } from './types.js';

/**
 * Renews a lease every ttl/3 from the grant until apply ends, and aborts the apply as soon as
 * the lease is provably gone: a long apply without renewal would be taken over
 * mid-flight and run twice. If the store cannot be reached for a whole TTL we
 * also abort, because by then someone else may hold the resource: whether its
 * renewals fail, or hang unanswered (a partition that resets nothing).
 */
export class KeepAlive {
  readonly #controller = new AbortController();
  readonly #timer: ReturnType<typeof setInterval>;
  #lease: Lease;
  #lastConfirmed = performance.now();
  #renewing = false;

  constructor(
    private readonly store: Store,
    private readonly action: Action,
    lease: Lease,
    onRenewed?: (lease: Lease) => void,
  ) {
    this.#lease = lease;
    const every = Math.max(1, Math.floor(lease.ttlMs / 3));
    this.#timer = setInterval(() => void this.#renew(onRenewed), every);
  }

  /** Fires with a LeaseLostError when the lease is gone. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** The lease as last renewed: always hand this one on, its expiry is the freshest. */
  get lease(): Lease {
    return this.#lease;
  }

  /** Takes over a lease renewed elsewhere (the Runner's holder check). */
  adopt(lease: Lease): void {
    this.#lease = lease;
    this.#lastConfirmed = performance.now();
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  async #renew(onRenewed?: (lease: Lease) => void): Promise<void> {
    if (this.signal.aborted) return;
    if (this.#renewing) {
      // A renew still unanswered after a whole TTL: a partition that neither answers nor resets
      // the connection. The store may have let the lease run out meanwhile.
      const unconfirmedFor = this.#unconfirmedFor();
      if (unconfirmedFor !== undefined)
        this.#lose(
          new StoreUnavailableError(
            'renew',
            new Error(`no answer for ${Math.round(unconfirmedFor)} ms, a whole TTL`),
          ),
        );
      return;
    }
    this.#renewing = true;
    try {
      const renewed = await this.store.renew(this.action, this.#lease, this.#lease.ttlMs);
      // Answered after the lease was given up for lost: the apply was told to stop already.
      if (this.signal.aborted) return;
      this.#lease = renewed;
      this.#lastConfirmed = performance.now();
      onRenewed?.(this.#lease);
    } catch (error) {
      if (error instanceof FenceStaleError || this.#unconfirmedFor() !== undefined)
        this.#lose(error);
    } finally {
      this.#renewing = false;
    }
  }

  /** How long the lease has gone unconfirmed, once that is a whole TTL; otherwise undefined. */
  #unconfirmedFor(): number | undefined {
    const unconfirmedFor = performance.now() - this.#lastConfirmed;
    return unconfirmedFor >= this.#lease.ttlMs ? unconfirmedFor : undefined;
  }

  #lose(cause: unknown): void {
    this.stop();
    this.#controller.abort(new LeaseLostError(this.#lease.resource, this.#lease.fence, { cause }));
  }
}
