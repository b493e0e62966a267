/**
 * Postgres CPU per operation: the CPU time of the backends serving one pool, read from /proc when
 * the database runs on this machine. pg_stat_statements would give time per statement, but it
 * must be in `shared_preload_libraries` (a server restart) and counts execution, not the parse,
 * plan and protocol work a backend also does; /proc counts all of it. Only the pool's own
 * backends are read (each client's process id, known from its connection), so other sessions
 * on a shared server, and the server's background processes (WAL writer, checkpointer), are not
 * counted.
 */
import { readFileSync } from 'node:fs';
import type pg from 'pg';

/** Clock ticks per second of /proc/<pid>/stat (Linux's USER_HZ). */
const TICKS_PER_SECOND = 100;

/** CPU microseconds a process has used: /proc/<pid>/schedstat (ns), else utime + stime of stat. */
function processMicros(pid: number): number | undefined {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1000;
  } catch {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return ((Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND) * 1e6;
    } catch {
      return undefined;
    }
  }
}

/** The CPU time used by every backend a pool has opened (from its `connect` event on). */
export class BackendCpu {
  readonly #pids = new Set<number>();
  /** The last reading of each backend: one that ended keeps what it had used. */
  readonly #last = new Map<number, number>();

  constructor(pool: pg.Pool) {
    pool.on('connect', (client) => {
      const pid = (client as unknown as { processID?: number }).processID;
      if (pid) this.#pids.add(pid);
    });
  }

  /** How many backends are counted. */
  get backends(): number {
    return this.#pids.size;
  }

  /** Microseconds used so far by the pool's backends; NaN when /proc does not show them. */
  micros(): number {
    let total = 0;
    let seen = false;
    for (const pid of this.#pids) {
      const now = processMicros(pid);
      if (now !== undefined) {
        this.#last.set(pid, now);
        seen = true;
      }
      total += this.#last.get(pid) ?? 0;
    }
    return seen ? total : Number.NaN;
  }
}

/** How the bench reads Postgres CPU here: which source, and whether pg_stat_statements is preloaded. */
export async function cpuMethod(pool: pg.Pool, cpu: BackendCpu): Promise<string> {
  const { rows } = await pool.query<{ libraries: string }>(
    `select pg_catalog.current_setting('shared_preload_libraries') as libraries`,
  );
  const preloaded = rows[0]!.libraries.split(',').some((l) => l.trim() === 'pg_stat_statements');
  const source = Number.isNaN(cpu.micros())
    ? 'not readable here (the database is not on this machine): Postgres CPU reads n/a'
    : `/proc/<pid>/schedstat of the ${cpu.backends} backends of the bench's pool`;
  return `Postgres CPU: ${source}; pg_stat_statements ${preloaded ? 'is' : 'is not'} in shared_preload_libraries`;
}
