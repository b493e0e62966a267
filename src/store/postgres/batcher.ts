/** A key the shared statement did not judge (its block failed): it is asked again on its own. */
export const AGAIN: unique symbol = Symbol('again');

/**
 * Set to true on the `batching` option's object to send every call through the shared statement,
 * a lone one too: how the tests hold the whole store contract to it. Not part of the API.
 */
export const batchEveryCall: unique symbol = Symbol('sideeffect.batchEveryCall');

/** How one kind of call reaches the database alone and together with others of its kind. */
export interface BatchKind<I, O> {
  /** The one-key statement: a call that finds none of its kind in flight, or one answered AGAIN. */
  one(item: I): Promise<O>;
  /** One statement for several calls: an answer per item, in their order. */
  many(items: readonly I[]): Promise<(O | typeof AGAIN)[]>;
  /**
   * Calls of one `name` share a statement only when their `with` agrees too; a later one whose
   * `with` differs waits for the next statement, so the two are judged in arrival order.
   */
  name?(item: I): { name: string; with: string };
  /** Bytes the call adds to the statement (its payload), held to a bound per statement. */
  bytes?(item: I): number;
}

/** How calls are grouped; see PgStoreOptions.batching. */
export interface BatchLimits {
  /** The most calls one statement carries. */
  maxKeys: number;
  /** The most payload bytes one statement carries (a single larger call still goes alone). */
  maxBytes: number;
  /**
   * Every call through the shared statement, even one alone: how the tests run the whole store
   * contract through it. Costs a lone caller the batch statement's overhead.
   */
  everyCall?: boolean;
}

/**
 * The calls of one store's batchers not yet answered, across their kinds. A call made while none
 * is (a lone caller's) cannot be joined by callers that a returning statement resumes, so it does
 * not wait for the end of its event-loop turn (setImmediate, after the turn's I/O): it goes once
 * the code that made it has run (process.nextTick, after the promise jobs of that code), with
 * whatever calls that code made too.
 */
export class BatchTraffic {
  calls = 0;
}

interface Waiting<I, O> {
  item: I;
  resolve(answer: O): void;
  reject(error: unknown): void;
}

/**
 * Groups one process's concurrent calls of one kind into one statement, graphile-worker style:
 * a call that finds no statement of its kind in flight is sent at the end of the event-loop turn
 * it was made in, with the calls of that turn (alone, by the one-key statement, when there are
 * none: a lone caller waits for nothing and pays nothing); calls that arrive while one is in
 * flight wait for it, and are sent together, up to the limits, when it returns. No timer: under
 * load a statement carries whatever arrived during one round trip, idle it carries one call.
 * Without it, one caller of one statement per round trip paid the database's per-statement and
 * per-commit cost for every key. A shared statement that fails as a whole (cancelled by a
 * `statement_timeout`, its backend terminated, the connection lost) has each of its calls asked
 * alone, once, outside the queue, as a key it answers AGAIN is: a failure of the statement, not of
 * a key, must not fail keys that would have been answered alone (batching off, one terminated
 * backend fails one call); a call whose own statement fails then gets that failure.
 */
export class Batcher<I, O> {
  readonly #kind: BatchKind<I, O>;
  readonly #limits: BatchLimits;
  readonly #traffic: BatchTraffic;
  #inFlight = false;
  #scheduled = false;
  #waiting: Waiting<I, O>[] = [];

  constructor(kind: BatchKind<I, O>, limits: BatchLimits, traffic = new BatchTraffic()) {
    this.#kind = kind;
    this.#limits = limits;
    this.#traffic = traffic;
  }

  run(item: I): Promise<O> {
    const traffic = this.#traffic;
    const lone = traffic.calls === 0;
    traffic.calls += 1;
    return new Promise<O>((resolve, reject) => {
      this.#waiting.push({
        item,
        resolve: (answer) => {
          traffic.calls -= 1;
          resolve(answer);
        },
        reject: (error) => {
          traffic.calls -= 1;
          reject(error);
        },
      });
      this.#schedule(lone);
    });
  }

  /**
   * Sends what waits once the calls of this event-loop turn have arrived: the callers a returning
   * statement resumes all call within the turn, and go together instead of the first alone and
   * the rest one round trip later. Not a timer: the turn ends as soon as its callbacks have run.
   * A lone call (see {@link BatchTraffic}) waits only for the code that made it.
   */
  #schedule(lone = false): void {
    if (this.#inFlight || this.#scheduled || this.#waiting.length === 0) return;
    this.#scheduled = true;
    if (lone) process.nextTick(this.#send);
    else setImmediate(this.#send);
  }

  readonly #send = (): void => {
    this.#scheduled = false;
    const batch = this.#take();
    this.#inFlight = true;
    const sent =
      batch.length === 1 && !this.#limits.everyCall
        ? this.#alone(batch[0]!)
        : this.#together(batch);
    sent.then(this.#returned, this.#returned);
  };

  readonly #returned = (): void => {
    this.#inFlight = false;
    this.#schedule();
  };

  /** The calls waiting longest that fit one statement; a call whose name clashes waits on. */
  #take(): Waiting<I, O>[] {
    const { maxKeys, maxBytes } = this.#limits;
    const batch: Waiting<I, O>[] = [];
    const rest: Waiting<I, O>[] = [];
    const names = new Map<string, string>();
    let bytes = 0;
    for (const call of this.#waiting) {
      const named = this.#kind.name?.(call.item);
      const size = this.#kind.bytes?.(call.item) ?? 0;
      const taken = named && names.get(named.name);
      const fits =
        batch.length < maxKeys &&
        (batch.length === 0 || bytes + size <= maxBytes) &&
        (taken === undefined || taken === named?.with);
      if (!fits) {
        rest.push(call);
        continue;
      }
      batch.push(call);
      bytes += size;
      if (named) names.set(named.name, named.with);
    }
    this.#waiting = rest;
    return batch;
  }

  #alone(call: Waiting<I, O>): Promise<void> {
    return this.#kind.one(call.item).then(call.resolve, call.reject);
  }

  async #together(batch: Waiting<I, O>[]): Promise<void> {
    let answers: (O | typeof AGAIN)[];
    try {
      answers = await this.#kind.many(batch.map((call) => call.item));
    } catch (error) {
      // Alone already (everyCall): its own statement failed.
      if (batch.length === 1) {
        batch[0]!.reject(error);
        return;
      }
      for (const call of batch) void this.#alone(call);
      return;
    }
    batch.forEach((call, i) => {
      const answer = answers[i]!;
      if (answer === AGAIN) void this.#alone(call);
      else call.resolve(answer);
    });
  }
}
