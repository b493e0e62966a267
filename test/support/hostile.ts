/**
 * A hostile neighbour in the store's database (the CVE-2018-1058 class): another role that can
 * create objects in `public` (the default before Postgres 15) and owns a schema that sits on the
 * store role's search_path. It plants operators and functions that match the store's own
 * expressions better than `pg_catalog` does (an exact operand type where pg_catalog needs an
 * implicit cast, a concrete type where pg_catalog's is polymorphic). Each planted routine bumps a
 * sequence (not transactional: a rollback does not hide it) and returns null, so `hits()` says
 * whether any of them ever ran, whatever the statement did afterwards.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export interface HostileNeighbour {
  /** The hostile role's own schema, to put on the store's search_path. */
  schema: string;
  /** How many operators and functions were planted (in `public` and in `schema`). */
  planted: number;
  /** A search_path for the store's connections with both planted schemas on it. */
  searchPath: string;
  /** How many times a planted routine ran. */
  hits(): Promise<number>;
  /** Drops the role and everything it owns. */
  drop(): Promise<void>;
}

const TYPES = [
  'text',
  'smallint',
  'integer',
  'bigint',
  'numeric',
  'real',
  'double precision',
  'interval',
  'timestamptz',
  'timestamp',
  'date',
  'bytea',
  'boolean',
  'jsonb',
];
const OPERATORS = ['=', '<>', '<', '<=', '>', '>=', '+', '-', '*', '/', '||'];
/** Functions the store's statements call by name, planted with concrete argument types. */
const FUNCTIONS = [
  'to_jsonb',
  'clock_timestamp',
  'now',
  'floor',
  'ceil',
  'hashtext',
  'current_setting',
  'decode',
  'date_part',
  'extract',
  'lag',
  'pg_advisory_xact_lock',
  'pg_try_advisory_lock',
  'pg_try_advisory_xact_lock',
  'pg_advisory_unlock',
  'to_regclass',
  'make_interval',
];
const PAIRS = ['text', 'integer', 'bigint', 'numeric', 'double precision', 'timestamptz'];

function ident(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * Plants the neighbour's objects in `url`'s database: a database of the test's own, since what is
 * planted in `public` reaches every connection of that database whose path includes `public`.
 */
export async function plantHostileNeighbour(url: string): Promise<HostileNeighbour> {
  const tag = randomBytes(4).toString('hex');
  const role = `sideeffect_hostile_${tag}`;
  const schema = `hostile_${tag}`;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  let planted = 0;
  try {
    await admin.query(`create role ${ident(role)} nologin`);
    await admin.query(`grant create on schema public to ${ident(role)}`);
    await admin.query(`create schema ${ident(schema)} authorization ${ident(role)}`);
    await admin.query(`set role ${ident(role)}`);
    await admin.query(`create sequence ${ident(schema)}.hits`);
    await admin.query(`grant usage on schema ${ident(schema)} to public`);
    await admin.query(`grant usage, select on sequence ${ident(schema)}.hits to public`);
    const hit = `perform pg_catalog.nextval('${ident(schema)}.hits'); return null;`;
    const operators = OPERATORS.flatMap((op) =>
      TYPES.flatMap((left) => TYPES.map((right) => ({ op, left, right }))),
    );
    const signatures = [
      '',
      'record',
      ...TYPES,
      ...PAIRS.flatMap((a) => PAIRS.map((b) => `${a}, ${b}`)),
    ];
    const functions = FUNCTIONS.flatMap((name) => signatures.map((args) => ({ name, args })));
    // What pg_catalog already has exactly is left alone: it is found first and wins.
    const { rows } = await admin.query<{ op: boolean[]; fn: boolean[] }>(
      `select array(select to_regoperator(o) is not null from unnest($1::text[]) o) as op,
              array(select to_regprocedure(f) is not null from unnest($2::text[]) f) as fn`,
      [
        operators.map(({ op, left, right }) => `pg_catalog.${op}(${left},${right})`),
        functions.map(({ name, args }) => `pg_catalog.${name}(${args})`),
      ],
    );
    const ddl: string[] = [];
    let n = 0;
    for (const target of ['public', schema]) {
      const s = ident(target);
      operators.forEach(({ op, left, right }, i) => {
        if (rows[0]!.op[i]) return;
        n += 1;
        const returns = ['=', '<>', '<', '<=', '>', '>='].includes(op) ? 'boolean' : left;
        ddl.push(
          `create function ${s}.planted_op_${n}(${left}, ${right}) returns ${returns} language plpgsql as $$ begin ${hit} end $$`,
          `create operator ${s}.${op} (leftarg = ${left}, rightarg = ${right}, function = ${s}.planted_op_${n})`,
        );
        planted += 1;
      });
      functions.forEach(({ name, args }, i) => {
        if (rows[0]!.fn[i]) return;
        ddl.push(
          `create function ${s}.${ident(name)}(${args}) returns text language plpgsql as $$ begin ${hit} end $$`,
        );
        planted += 1;
      });
      // An ordered-set aggregate closer to the stats' percentile than pg_catalog's own.
      ddl.push(
        `create function ${s}.planted_state(double precision[], double precision) returns double precision[] language plpgsql as $$ begin ${hit} end $$`,
        `create function ${s}.planted_final(double precision[], numeric, double precision) returns double precision language plpgsql as $$ begin ${hit} end $$`,
        `create aggregate ${s}.percentile_cont(numeric order by double precision) (sfunc = ${s}.planted_state, stype = double precision[], finalfunc = ${s}.planted_final, finalfunc_extra)`,
      );
      planted += 1;
    }
    await admin.query(ddl.join(';\n'));
    await admin.query('reset role');
  } catch (error) {
    await admin.end();
    throw error;
  }
  await admin.end();
  return {
    schema,
    planted,
    searchPath: `${ident(schema)}, public`,
    hits: async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        const { rows } = await client.query<{ n: string }>(
          `select case when is_called then last_value else 0 end as n from ${ident(schema)}.hits`,
        );
        return Number(rows[0]!.n);
      } finally {
        await client.end();
      }
    },
    drop: async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        await client.query(`drop owned by ${ident(role)} cascade`);
        await client.query(`drop role ${ident(role)}`);
      } finally {
        await client.end();
      }
    },
  };
}
