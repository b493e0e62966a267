-- sideeffect: backward-compatible
-- 0008: no caller's search_path reaches the store's code (issue: least privilege and a hostile
-- database, the CVE-2018-1058 class). Every plpgsql function and the SQL functions purge() and
-- purge_batch() already pin `search_path` to this schema. store_now() and epoch_ms() did not:
-- Postgres inlines them into the calling statement (what 0006 relied on for speed), and an inlined
-- body resolves its names through the CALLER's search_path. epoch_ms()'s `numeric * integer` has
-- no exact match in pg_catalog, so an operator another role planted in `public` (or in any schema
-- on the caller's path) matched it better and ran as the store's role.
--
-- Pinning them with `set search_path` would stop the inlining, so their bodies instead name
-- pg_catalog for every function and operator, with operand types pg_catalog matches exactly:
-- nothing in them is looked up on any search_path. Same names, arguments, result types and
-- volatility as before, so statements prepared by running workers stay valid.

create or replace function store_now() returns timestamptz
  language sql volatile
  as $$ select pg_catalog.clock_timestamp() $$;

create or replace function epoch_ms(t timestamptz) returns bigint
  language sql stable strict
  as $$ select pg_catalog.floor(extract(epoch from t) operator(pg_catalog.*) 1000::numeric)::bigint $$;

-- Verdicts only through the store's function (issue: least privilege): resolve_uncertain runs with
-- its owner's rights, so an operator's role may record a verdict without holding UPDATE on `keys`
-- or INSERT on `events` itself, and nothing else. Its search_path is pinned (`<schema>, pg_temp`,
-- pg_temp last), so no caller's object runs under those rights. EXECUTE is taken from PUBLIC (a
-- read-only role with USAGE on the schema could otherwise write verdicts through it) and given to
-- every role that could already write them directly (UPDATE on keys): running workers of a
-- deployment with its own roles keep resolving through the upgrade.
alter function resolve_uncertain(text, boolean, bytea, text, text, bigint) security definer;
revoke execute on function resolve_uncertain(text, boolean, bytea, text, text, bigint) from public;
do $$
declare
  v_role name;
begin
  for v_role in
    select distinct pg_catalog.pg_get_userbyid(acl.grantee)
      from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) acl
     where c.oid = 'keys'::pg_catalog.regclass and acl.privilege_type = 'UPDATE'
       and acl.grantee <> 0
  loop
    execute pg_catalog.format(
      'grant execute on function resolve_uncertain(text, boolean, bytea, text, text, bigint) to %I',
      v_role);
  end loop;
end
$$;

-- What a worker of the PREVIOUS release may see when its migrate() starts mid-roll (issue: rolling
-- upgrade). 0.1.0 reads `migrations` and refuses any version it does not know, so a 0.1.0 worker
-- restarting after these migrations ran could not start. From here on `migrations` keeps only the
-- versions 0.1.0 knows (0001), and every later one is recorded in `migration_history`, which later
-- versions read as well. `backward_compatible` is the migration's own declaration (a
-- `-- sideeffect: backward-compatible` line): workers of the version before it keep working on
-- the schema it leaves, so their migrate() accepts it instead of refusing to start.
create table migration_history (
  version int primary key,
  name text not null,
  sha256 text not null,
  applied_at timestamptz not null default pg_catalog.now(),
  backward_compatible boolean not null default false
);
insert into migration_history (version, name, sha256, applied_at)
  select version, name, sha256, applied_at from migrations where version > 1;
delete from migrations where version > 1;
