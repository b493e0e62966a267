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
