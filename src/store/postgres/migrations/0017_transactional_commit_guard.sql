-- sideeffect: backward-compatible
-- 0017: a transactional effect's end is guarded by the database alone, and its work's settings
-- hold through its COMMIT (issue 39). The commit check of 0007/0011 read the key from a setting
-- (`sideeffect.transactional_key`) and its early firing from another (`sideeffect.constraints_early`):
-- the work could write both, and disarm the check with one set_config(). Now tx_open() writes the
-- grant's row into tx_grants, which no role but the owner writes, and a deferred constraint
-- trigger on that row refuses any commit that reaches it before the store's finish deleted it.
-- No table of an earlier version is altered or locked.
-- And the finish no longer resets the work's settings before the COMMIT (PgStore resets the
-- session after it): the store's record raises a synchronous_commit the work lowered, and
-- refuses a session_replication_role it changed (SE164). Same signatures: a 0.2.0 worker's
-- tx_open() and tx_finish() get the new guard, and its own reset still runs before them.

-- One row per transactional grant in flight, written by tx_open() in the grant's transaction and
-- deleted by its finish: the commit check refuses a commit that finds it. With it, the settings
-- the commit of the store's record must not run below (the connection's, as the grant saw them).
-- A row is never committed: a commit that reaches it is refused and rolls it back.
create table tx_grants (
  xid bigint primary key,
  key text not null,
  synchronous_commit text not null,
  session_replication_role text not null,
  -- When the check last fired early and deferred itself again (statement_timestamp()).
  checked_at timestamptz
);

-- The commit check (0007), keyed on the grant's row instead of a setting. A row still there when
-- the check fires means the transaction ends before the store recorded the key: a COMMIT or
-- PREPARE TRANSACTION of the work, refused (SE021) so everything rolls back. Fired early by the
-- work's SET CONSTRAINTS ... IMMEDIATE, it defers itself again to the commit (issue 31): its
-- constraint set back to DEFERRED and its event queued anew by touching the row. A commit fires
-- the event it queued in the same loop, within the same statement: a second firing in one
-- statement is the commit's, and is refused. 0011's check on resources stays for the workers of
-- 0.2.0 still running (it judges only a grant that set its key setting, which this version's
-- tx_open() no longer does); a later migration drops it.
create function tx_grant_check() returns trigger
  language plpgsql
  set search_path from current
as $$
declare
  v_checked timestamptz;
begin
  select g.checked_at into v_checked from tx_grants g where g.xid = new.xid;
  if not found then
    return null;
  end if;
  if v_checked is distinct from pg_catalog.statement_timestamp() then
    set constraints tx_grant_recorded deferred;
    update tx_grants set checked_at = pg_catalog.statement_timestamp() where xid = new.xid;
    return null;
  end if;
  raise exception using
    errcode = 'SE021',
    message = pg_catalog.format('sideeffect: the transaction of transactional key %s ended before the key was recorded', new.key),
    hint = 'Run the effect''s statements on the transaction it is given; never COMMIT or ROLLBACK it.';
end
$$;

create constraint trigger tx_grant_recorded
  after insert or update on tx_grants
  deferrable initially deferred
  for each row
  execute function tx_grant_check();

-- A transactional effect's bounds, local to its transaction (0016): no statement and no pause
-- longer than the TTL, on Postgres 17 and later not the whole transaction either. p_key is no
-- longer set as `sideeffect.transactional_key` (the commit check reads tx_grants); kept for
-- 0016's signature.
create or replace function tx_bounds(p_key text, p_ttl text, p_remaining text) returns text
  language plpgsql
  set search_path from current
as $$
declare
  v_set text;
begin
  v_set := pg_catalog.set_config('statement_timeout', p_ttl, true)
        || pg_catalog.set_config('idle_in_transaction_session_timeout', p_ttl, true);
  if pg_catalog.current_setting('server_version_num')::integer >= 170000 then
    v_set := pg_catalog.set_config('transaction_timeout', p_remaining, true);
  end if;
  return v_set;
end
$$;

-- As in 0016, and a grant also writes its tx_grants row (after the resource's row is locked and
-- its fence raised), with the commit settings the connection came with.
create or replace function tx_open(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_ttl text,
  p_lock_wait text,
  p_user text,
  p_search_path text,
  p_pooled boolean,
  out o_session text,
  out o_pid integer,
  out o_xid bigint,
  out o_temp bigint,
  out o_prepared bigint,
  out o_outcome text,
  out o_fence bigint,
  out o_retry_after_ms bigint,
  out o_result bytea,
  out o_reason text
)
  language plpgsql
  set search_path from current
as $$
declare
  v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
  v_seen bigint;
  v_set text;
begin
  o_session := tx_session_state(p_user, p_search_path);
  o_pid := pg_catalog.pg_backend_pid();
  o_xid := pg_catalog.txid_current();
  if p_pooled then
    o_temp := tx_temp_relations();
    o_prepared := tx_sql_prepared();
  end if;
  v_set := tx_bounds(p_key, p_ttl, p_ttl) || pg_catalog.set_config('lock_timeout', p_lock_wait, true);

  update resources set fence = fence + 1
   where resource = p_resource and holder is null
     and not exists (select from keys where key = p_key)
  returning fence, (select r.fence from resources r where r.resource = p_resource)
    into o_fence, v_seen;
  if not found then
    select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
      into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
      from tx_acquire(p_key, p_resource, p_digest) a;
  elsif o_fence <> v_seen + 1 then
    select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
      into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
      from tx_recheck(p_key, p_resource, p_digest, o_fence) a;
  else
    o_outcome := 'applied';
  end if;
  if o_outcome = 'applied' then
    insert into sink_fences as sink (resource, fence) values (p_resource, o_fence)
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence);
    insert into tx_grants (xid, key, synchronous_commit, session_replication_role)
    values (o_xid, p_key, pg_catalog.current_setting('synchronous_commit'),
            pg_catalog.current_setting('session_replication_role'));
  end if;
  v_set := pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
end
$$;

-- The store's record of a transactional effect, inside the work's transaction with the work's
-- settings still in force, just before its COMMIT: 0016's checks behind a transaction-mode
-- pooler (SE163) and the work's session advisory locks released; the bounds set again for what
-- is left; a session_replication_role other than the grant's refused (SE164: the store's
-- triggers would not run for its record); a synchronous_commit below the grant's raised to it
-- (the commit keeps the work's writes and the key together, never less durably than the
-- connection's own); the key written done by tx_record() (0013), SE162 and SE161 raised as in
-- 0016; and the grant's row deleted, so the commit check lets the COMMIT through. The key's
-- commit time (epoch ms).
create function tx_settle(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_fence bigint,
  p_retry_safety text,
  p_result bytea,
  p_xid bigint,
  p_ttl text,
  p_remaining text,
  p_pooled boolean,
  p_temp bigint,
  p_prepared bigint
) returns bigint
  language plpgsql
  set search_path from current
as $$
declare
  v_locks bigint;
  v_left text[] := '{}';
  v_set text;
  v_same boolean;
  v_at_ms bigint;
  v_levels constant text[] := array['off', 'local', 'remote_write', 'on', 'remote_apply'];
  g tx_grants;
begin
  if p_pooled then
    select pg_catalog.count(*) into v_locks from pg_catalog.pg_locks
     where locktype = 'advisory' and pid = pg_catalog.pg_backend_pid();
  end if;
  perform pg_catalog.pg_advisory_unlock_all();
  if p_pooled then
    if v_locks > (select pg_catalog.count(*) from pg_catalog.pg_locks
                   where locktype = 'advisory' and pid = pg_catalog.pg_backend_pid()) then
      v_left := v_left || 'a session advisory lock'::text;
    end if;
    if tx_temp_relations() > p_temp then
      v_left := v_left || 'a temporary relation'::text;
    end if;
    if tx_sql_prepared() > p_prepared then
      v_left := v_left || 'a prepared statement (PREPARE)'::text;
    end if;
    if pg_catalog.cardinality(v_left) > 0 then
      raise exception using
        errcode = 'SE163',
        message = 'sideeffect: the transactional work left session state behind a transaction-mode pooler',
        detail = pg_catalog.array_to_string(v_left, ', ');
    end if;
  end if;
  v_set := tx_bounds(p_key, p_ttl, p_remaining);

  select * into g from tx_grants where xid = pg_catalog.txid_current() and key = p_key;
  if found then
    if pg_catalog.current_setting('session_replication_role') <> g.session_replication_role then
      raise exception using
        errcode = 'SE164',
        message = pg_catalog.format('sideeffect: the work of transactional key %s set session_replication_role to %s', p_key,
                                    pg_catalog.current_setting('session_replication_role')),
        detail = pg_catalog.format('session_replication_role %s (the connection''s: %s)',
                                   pg_catalog.current_setting('session_replication_role'), g.session_replication_role);
    end if;
    -- The levels from weakest to strongest: a weaker one than the grant's is raised.
    if pg_catalog.array_position(v_levels, pg_catalog.current_setting('synchronous_commit'))
       < pg_catalog.array_position(v_levels, g.synchronous_commit) then
      v_set := pg_catalog.set_config('synchronous_commit', g.synchronous_commit, true);
    end if;
  end if;

  select r.o_same, r.o_at_ms into v_same, v_at_ms
    from tx_record(p_key, p_resource, p_digest, p_fence, p_retry_safety, p_result, p_xid) r;
  if not v_same then
    raise exception using
      errcode = 'SE162',
      message = pg_catalog.format('sideeffect: the work ended the transaction of transactional key %s', p_key);
  end if;
  if v_at_ms is null then
    raise exception using
      errcode = 'SE161',
      message = pg_catalog.format('sideeffect: transactional key %s was committed meanwhile', p_key);
  end if;
  delete from tx_grants where xid = p_xid and key = p_key;
  return v_at_ms;
end
$$;

-- 0016's finish, for a worker of 0.2.0 (which reset the session before it): the session's
-- fingerprint, then tx_settle().
create or replace function tx_finish(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_fence bigint,
  p_retry_safety text,
  p_result bytea,
  p_xid bigint,
  p_ttl text,
  p_remaining text,
  p_user text,
  p_search_path text,
  p_pooled boolean,
  p_temp bigint,
  p_prepared bigint,
  out o_session text,
  out o_at_ms bigint
)
  language plpgsql
  set search_path from current
as $$
begin
  o_session := tx_session_state(p_user, p_search_path);
  o_at_ms := tx_settle(p_key, p_resource, p_digest, p_fence, p_retry_safety, p_result, p_xid,
                       p_ttl, p_remaining, p_pooled, p_temp, p_prepared);
end
$$;
