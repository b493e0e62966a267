/**
 * The floor with batching: the same two upserts per action as the bare floor (claim the key,
 * record the result), but the rows of concurrent callers go as ONE `unnest` statement per kind.
 * No timer: a row waits only while the previous statement of its kind is in flight, and the rows
 * that gathered meanwhile go as the next one. What a store that batches its statements the same
 * way is measured against.
 */
import type pg from 'pg';

interface Pending<Row> {
  row: Row;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/** Rows sent one statement at a time, each statement carrying every row that waited for it. */
class Batcher<Row> {
  readonly #send: (rows: Row[]) => Promise<unknown>;
  #queue: Pending<Row>[] = [];
  #inFlight = false;

  constructor(send: (rows: Row[]) => Promise<unknown>) {
    this.#send = send;
  }

  add(row: Row): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ row, resolve, reject });
      if (!this.#inFlight) void this.#drain();
    });
  }

  async #drain(): Promise<void> {
    this.#inFlight = true;
    while (this.#queue.length > 0) {
      const batch = this.#queue;
      this.#queue = [];
      try {
        await this.#send(batch.map((p) => p.row));
        for (const p of batch) p.resolve();
      } catch (error) {
        for (const p of batch) p.reject(error);
      }
    }
    this.#inFlight = false;
  }
}

/** The two upserts of the floor, batched across concurrent callers, on `table` (key, state, result). */
export function batchedUpserts(
  pool: pg.Pool,
  table: string,
): (key: string, result: Buffer) => Promise<void> {
  const claim = new Batcher<string>((keys) =>
    pool.query({
      name: 'bench_batched_claim',
      text: `insert into ${table} (key, state) select k, 'applying' from pg_catalog.unnest($1::text[]) as k
        on conflict (key) do update set state = excluded.state`,
      values: [keys],
    }),
  );
  const record = new Batcher<[string, Buffer]>((rows) =>
    pool.query({
      name: 'bench_batched_record',
      text: `insert into ${table} (key, state, result)
        select k, 'done', r from unnest($1::text[], $2::bytea[]) as u (k, r)
        on conflict (key) do update set state = excluded.state, result = excluded.result`,
      values: [rows.map(([k]) => k), rows.map(([, r]) => r)],
    }),
  );
  return async (key, result) => {
    await claim.add(key);
    await record.add([key, result]);
  };
}
