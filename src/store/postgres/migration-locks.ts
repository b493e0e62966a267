/**
 * Which of the store's tables a migration locks against running workers, and in which mode, read
 * from its SQL: migrate() takes those locks first, all of them, in one order, before it runs any
 * migration. Taken one by one as the statements reached them, a migration holding one table
 * (keys, for its ALTER) waited for another (resources, for a trigger) that a worker's transaction
 * held while that transaction queued behind the first: Postgres ended the cycle by cancelling the
 * migration, every time under steady traffic (issue 39).
 */

/** Table lock modes from weakest to strongest; only SHARE and above stop a worker's statements. */
const MODES = ['share', 'share row exclusive', 'exclusive', 'access exclusive'] as const;

export type LockMode = (typeof MODES)[number];

/** The statements of the store's migrations that lock an existing table against its writers. */
const RULES: ReadonlyArray<readonly [RegExp, LockMode]> = [
  [/\balter\s+table\s+(?:if\s+exists\s+)?(?:only\s+)?(\w+)/g, 'access exclusive'],
  [/\bdrop\s+table\s+(?:if\s+exists\s+)?(\w+)/g, 'access exclusive'],
  [/\btruncate\s+(?:table\s+)?(?:only\s+)?(\w+)/g, 'access exclusive'],
  [/\bdrop\s+trigger\s+(?:if\s+exists\s+)?\w+\s+on\s+(\w+)/g, 'access exclusive'],
  [
    /\bcreate\s+(?:or\s+replace\s+)?(?:constraint\s+)?trigger\s+\w+[^;]*?\bon\s+(\w+)/g,
    'share row exclusive',
  ],
  [/\breferences\s+(\w+)/g, 'share row exclusive'],
  [
    /\bcreate\s+(?:unique\s+)?index\s+(?:if\s+not\s+exists\s+)?(?:\w+\s+)?on\s+(?:only\s+)?(\w+)/g,
    'share',
  ],
];

/**
 * The order every migrate() locks tables in: the store's own lock order (a resource before its
 * keys' rows does not apply to whole tables, whose users take them in either order), then the
 * rest by name. One order everywhere means two migrate() calls never wait on each other in a
 * cycle; a cycle with a worker's transaction is ended by migrate()'s shorter lock wait.
 */
const FIRST = ['keys', 'resources', 'events', 'sink_fences'];

const rank = (mode: LockMode): number => MODES.indexOf(mode);

/** SQL without its comments, lower case: what the rules read. */
function statementsOf(sql: string): string {
  return sql.replace(/--[^\n]*/g, '').toLowerCase();
}

/**
 * The tables (among `existing`) the given migrations lock against workers, each with the
 * strongest mode any of them needs, in the order they must be locked. Tables the migrations
 * create are not in `existing`: no worker uses them yet.
 */
export function migrationLocks(
  sqls: readonly string[],
  existing: ReadonlySet<string>,
): Array<{ table: string; mode: LockMode }> {
  const modes = new Map<string, LockMode>();
  for (const sql of sqls) {
    const text = statementsOf(sql);
    for (const [pattern, mode] of RULES) {
      for (const match of text.matchAll(pattern)) {
        const table = match[1]!;
        if (!existing.has(table)) continue;
        const had = modes.get(table);
        if (!had || rank(mode) > rank(had)) modes.set(table, mode);
      }
    }
  }
  const order = (table: string) => {
    const at = FIRST.indexOf(table);
    return at === -1 ? FIRST.length : at;
  };
  return [...modes]
    .sort(([a], [b]) => order(a) - order(b) || (a < b ? -1 : a > b ? 1 : 0))
    .map(([table, mode]) => ({ table, mode }));
}
