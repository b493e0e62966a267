-- sideeffect: backward-compatible
-- 0013: the runtime role runs the store through its functions only (issue 31). A worker's role
-- held INSERT/UPDATE/DELETE on the store's tables for the statements the store sent as plain SQL;
-- with them it could also record a verdict by `update keys` with no event, forge or delete
-- events, raise a fence, lower a sink mark (stale writes then land) and purge below the floor,
-- and so could the effect code that runs on its connection inside a transactional effect. Every
-- write is now a function that runs with its owner's rights (SECURITY DEFINER, search_path
-- pinned to this schema, pg_temp last), and the runtime grants (grantsScript) keep SELECT only.
-- Same statements of earlier versions keep working: every function they call keeps its name,
-- arguments and result type, and their plain SQL keeps working while their role keeps the old
-- grants (docs/database-roles.md, "Rolling out").

-- The holder's complete in one statement (0006's plain SQL, unchanged): one row per key moved.
create function complete_held(p_key text, p_resource text, p_fence bigint, p_result bytea)
  returns setof integer
  language sql
  set search_path from current
as $$
  with released as (
    update resources r set holder = null, expires_at = null
     where resource = p_resource and fence = p_fence and holder = p_key
       and exists (select from keys k
                    where k.key = r.holder and k.fence = r.fence
                      and k.state in ('held', 'applying'))
    returning store_now() as at
  ), moved as (
    update keys k
       set state = 'done', result = p_result, updated_at = released.at, completed_from = k.state
      from released
     where k.key = p_key and k.fence = p_fence
    returning 1
  )
  select 1 from moved
$$;

-- Reconcile claims (the store's claimReconciles, unchanged): the keys claimed.
create function claim_reconciles(p_limit integer, p_restart_after_ms double precision)
  returns setof text
  language sql
  set search_path from current
as $$
  with candidates as (
    select k.key, k.fence from keys k
    left join reconcile_starts r on r.key = k.key
    where k.state = 'uncertain'
      and (r.key is null or r.fence <> k.fence
           or r.started_at <= store_now() - p_restart_after_ms * interval '1 millisecond')
    order by k.updated_at
    limit p_limit
    for update of k skip locked
  ), claimed as (
    insert into reconcile_starts as r (key, fence, started_at)
    select key, fence, store_now() from candidates
    on conflict (key) do update set fence = excluded.fence, started_at = excluded.started_at
      where r.fence <> excluded.fence
         or r.started_at <= excluded.started_at - p_restart_after_ms * interval '1 millisecond'
    returning key
  )
  select key from claimed
$$;

-- The transactional grant of a key never seen, on a resource nobody holds (the store's txAcquire,
-- unchanged): the resource row locked and its fence raised, the sink mark raised to it. No row:
-- tx_acquire() judges. o_seen is the fence the statement's snapshot saw.
create function tx_grant_fresh(p_key text, p_resource text, out o_fence bigint, out o_seen bigint)
  returns setof record
  language sql
  set search_path from current
as $$
  with granted as (
    update resources set fence = fence + 1
     where resource = p_resource and holder is null and not exists (select from keys where key = p_key)
    returning fence, (select fence from resources where resource = p_resource) as seen
  ), raised as (
    insert into sink_fences as sink (resource, fence) select p_resource, fence from granted
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence)
  )
  select fence, seen from granted
$$;

-- A sink mark raised (PgFencedSink, and a transactional grant's takeover), only to a fence the
-- store of THIS schema issued for the resource: a sink pointed at another schema than its store's
-- (whose fences it never sees raised by transactional grants) is refused at its first write
-- instead of letting a paused holder's stale write land (SE131). p_at_least: raise to at least
-- p_fence (a read, or the grant; a probe's read may name the next fence, one past the issued
-- one); otherwise refuse a lower one. p_issued_here false: the sink's data lives in another
-- database than its store (PgFencedSink's separateDatabase), where no store issues fences, so
-- none can be checked. Returns the mark, or null when a newer fence is recorded (nothing raised).
create function raise_sink_mark(
  p_resource text, p_fence bigint, p_at_least boolean, p_issued_here boolean default true
)
  returns bigint
  language plpgsql
  set search_path from current
as $$
declare
  v_issued bigint;
  v_mark bigint;
begin
  select fence into v_issued from resources where resource = p_resource;
  -- A probe reads with the fence after the key's last (src/activities), one past the issued one.
  if p_issued_here and (v_issued is null or p_fence > v_issued + p_at_least::integer) then
    raise exception using
      errcode = 'SE131',
      message = format('sideeffect: fence %s of resource %s was never issued by the store of schema %s',
                       p_fence, p_resource, current_schema()),
      hint = 'Give the PgFencedSink the schema of the store whose leases it checks, or, for data in another database than the store''s, separateDatabase: true.';
  end if;
  if p_at_least then
    insert into sink_fences as sink (resource, fence) values (p_resource, p_fence)
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence)
    returning fence into v_mark;
  else
    insert into sink_fences as sink (resource, fence) values (p_resource, p_fence)
    on conflict (resource) do update set fence = excluded.fence
    where sink.fence <= excluded.fence
    returning fence into v_mark;
  end if;
  return v_mark;
end
$$;

-- The transactional effect's key, written once as done in the grant's transaction (the store's
-- txComplete): only by the transaction that raised the resource's fence to p_fence (the row's
-- xmin is this transaction), so no key is recorded done without its grant (SE132). o_same false:
-- the work ended the grant's transaction, nothing written. o_at_ms null: the key was committed
-- meanwhile.
create function tx_record(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_fence bigint,
  p_retry_safety text,
  p_result bytea,
  p_xid bigint,
  out o_same boolean,
  out o_at_ms bigint
)
  language plpgsql
  set search_path from current
as $$
declare
  v_now timestamptz;
begin
  o_same := txid_current() = p_xid;
  if not o_same then
    return;
  end if;
  perform from resources r
   where r.resource = p_resource and r.fence = p_fence and r.holder is null
     and r.xmin::text = (p_xid % 4294967296)::text;
  if not found then
    raise exception using
      errcode = 'SE132',
      message = format('sideeffect: fence %s of resource %s was not granted in this transaction',
                       p_fence, p_resource);
  end if;
  v_now := store_now();
  insert into keys (key, resource, digest, state, fence, retry_safety, result, updated_at,
                    granted_at, granted_state, granted_fence)
  values (p_key, p_resource, p_digest, 'done', p_fence, p_retry_safety, p_result, v_now,
          v_now, 'done', p_fence)
  on conflict (key) do nothing
  returning epoch_ms(updated_at) into o_at_ms;
end
$$;

-- After work that rolled a transactional grant back (the store's txBurnFence): the resource moves
-- to the fence that grant had, which what the work wrote after its ROLLBACK may carry, unless
-- someone holds it or moved it already. One step past the resource's fence and no further: no
-- caller raises a fence at will.
create function tx_burn_fence(p_resource text, p_fence bigint) returns void
  language plpgsql
  set search_path from current
as $$
begin
  insert into resources (resource) values (p_resource) on conflict do nothing;
  update resources set fence = p_fence
   where resource = p_resource and holder is null and fence = p_fence - 1;
end
$$;

-- Purges keep a floor (7 days, the library's default minPurgeAgeMs) for every role but the
-- schema's owner (and its members): a purge younger than that is a forced one (`--force`), and a
-- key purged while its workflow may still replay is run again. SE133 below it.
create or replace function purge_batch(p_older_than_ms bigint, p_limit int) returns bigint
  language plpgsql
  set search_path from current
as $$
declare
  v_purged bigint;
begin
  if p_older_than_ms < 604800000 and not pg_has_role(
       session_user,
       (select nspowner from pg_namespace where nspname = current_schema()),
       'MEMBER') then
    raise exception using
      errcode = 'SE133',
      message = format('sideeffect: a purge of keys younger than 7 days (%s ms) needs the schema owner''s role',
                       p_older_than_ms);
  end if;
  with gone as (
    delete from keys
     where key in (
       select key from keys
        where state = 'done' and updated_at < store_now() - p_older_than_ms * interval '1 millisecond'
        order by updated_at
        limit p_limit
          for update skip locked)
    returning key
  ), dropped as (
    delete from events where key in (select key from gone)
  )
  select count(*) into v_purged from gone;
  return v_purged;
end
$$;

-- 0.1.0's purge, with the same floor.
create or replace function purge(p_older_than_ms bigint) returns bigint
  language plpgsql
  set search_path from current
as $$
begin
  return purge_batch(p_older_than_ms, 2147483647);
end
$$;

-- 0.1.0's resolve (`resolve_uncertain($1..$5)`, result o_outcome, o_result, o_state) answered in
-- its own shape: 0002 replaced that function by one with a defaulted sixth argument and one more
-- result column, so a 0.1.0 worker that had prepared the statement before the upgrade failed once with
-- "cached plan must not change result type". A five-argument overload beside a defaulted sixth
-- would be ambiguous, so the six-argument one is made again without the default (same result
-- type, same rights, so statements prepared on it re-plan onto it), and the five-argument one
-- answers 0.1.0's shape.
do $$
declare
  v_roles name[];
  v_role name;
begin
  select pg_catalog.array_agg(distinct pg_catalog.pg_get_userbyid(acl.grantee))
    into v_roles
    from pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) acl
   where p.oid = 'resolve_uncertain(text, boolean, bytea, text, text, bigint)'::pg_catalog.regprocedure
     and acl.privilege_type = 'EXECUTE' and acl.grantee <> 0;
  drop function resolve_uncertain(text, boolean, bytea, text, text, bigint);
  create function resolve_uncertain(
    p_key text,
    p_applied boolean,
    p_result bytea,
    p_reason text,
    p_actor text,
    p_fence bigint,
    out o_outcome text,
    out o_result bytea,
    out o_state text,
    out o_fence bigint
  )
    language plpgsql
    security definer
    set search_path from current
  as $body$
  begin
    select r.o_outcome, r.o_result, r.o_state, r.o_fence
      into o_outcome, o_result, o_state, o_fence
      from resolve_uncertain(p_key, p_applied, p_result, p_reason, p_actor, p_fence, null::text) r;
  end
  $body$;
  create function resolve_uncertain(
    p_key text,
    p_applied boolean,
    p_result bytea,
    p_reason text,
    p_actor text,
    out o_outcome text,
    out o_result bytea,
    out o_state text
  )
    language plpgsql
    security definer
    set search_path from current
  as $body$
  begin
    select r.o_outcome, r.o_result, r.o_state into o_outcome, o_result, o_state
      from resolve_uncertain(p_key, p_applied, p_result, p_reason, p_actor, null::bigint, null::text) r;
  end
  $body$;
  revoke execute on function resolve_uncertain(text, boolean, bytea, text, text, bigint) from public;
  revoke execute on function resolve_uncertain(text, boolean, bytea, text, text) from public;
  foreach v_role in array coalesce(v_roles, '{}') loop
    execute pg_catalog.format(
      'grant execute on function resolve_uncertain(text, boolean, bytea, text, text, bigint), resolve_uncertain(text, boolean, bytea, text, text) to %I',
      v_role);
  end loop;
end
$$;

-- Makes every function of the store that a role may call run with its owner's rights and a
-- pinned search_path, and takes EXECUTE on it from PUBLIC. migrate() and migrationScript() call
-- it after every migration they apply: CREATE OR REPLACE FUNCTION (a later migration redefining
-- one) resets SECURITY DEFINER unless the new text restates it. Not made so, and callable by no
-- role but the owner: the helpers those functions call (conclude, move_key: they move keys
-- unchecked), 0004's unused tx_complete (it records a key done without a grant), this function,
-- and store_now() and epoch_ms(), which read no table and must stay inlinable. A migration adding
-- such a helper adds it to the list below. Roles that could run the store when a function is
-- first secured (EXECUTE on renew(), the runtime role's) keep EXECUTE on it, so running workers
-- are not cut off by an upgrade.
create function secure_store_functions() returns void
  language plpgsql
  set search_path from current
as $$
declare
  v_fn pg_catalog.regprocedure;
  v_role name;
  v_internal constant text[] := array['conclude', 'move_key', 'tx_complete',
                                      'secure_store_functions', 'store_now', 'epoch_ms'];
  v_runtime name[];
begin
  select pg_catalog.array_agg(distinct pg_catalog.pg_get_userbyid(acl.grantee))
    into v_runtime
    from pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) acl
   where p.oid = 'renew(text, text, bigint, bigint, boolean)'::pg_catalog.regprocedure
     and acl.privilege_type = 'EXECUTE' and acl.grantee <> 0
     and acl.grantee <> p.proowner;
  -- And, as 0008 did for verdicts, every role that could write the keys directly.
  select pg_catalog.array_agg(distinct r) into v_runtime
    from (select pg_catalog.unnest(v_runtime) as r
          union
          select pg_catalog.pg_get_userbyid(acl.grantee)
            from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) acl
           where c.oid = 'keys'::pg_catalog.regclass and acl.privilege_type = 'UPDATE'
             and acl.grantee <> 0 and acl.grantee <> c.relowner) roles;
  for v_fn in
    select p.oid::pg_catalog.regprocedure
      from pg_catalog.pg_proc p
     where p.pronamespace = (select n.oid from pg_catalog.pg_namespace n
                         where n.nspname = pg_catalog.current_schema())
       and p.prokind = 'f'
       and p.proname <> all (v_internal)
       and (not p.prosecdef
            or not exists (select from pg_catalog.unnest(p.proconfig) c
                            where c like 'search\_path=%'))
  loop
    execute pg_catalog.format('alter function %s security definer set search_path = %I, pg_temp',
                              v_fn, pg_catalog.current_schema());
    execute pg_catalog.format('revoke execute on function %s from public', v_fn);
    foreach v_role in array coalesce(v_runtime, '{}') loop
      execute pg_catalog.format('grant execute on function %s to %I', v_fn, v_role);
    end loop;
  end loop;
  for v_fn in
    select p.oid::pg_catalog.regprocedure
      from pg_catalog.pg_proc p
     where p.pronamespace = (select n.oid from pg_catalog.pg_namespace n
                         where n.nspname = pg_catalog.current_schema())
       and p.proname in ('conclude', 'move_key', 'tx_complete', 'secure_store_functions')
  loop
    execute pg_catalog.format('revoke execute on function %s from public', v_fn);
  end loop;
end
$$;

select secure_store_functions();
