-- sideeffect: backward-compatible
-- 0022 (issue 45): no fence repeats after a promotion. A standby promoted while it lagged had not
-- seen the last fences its old primary issued, and issued them again: two holders of one fence,
-- and a sink in another database (PgFencedSink's separateDatabase), which still holds the old
-- primary's mark, let both write. Every grant now takes its fence from next_fence(), which starts
-- each new timeline at (timeline - 1) * 2^32: above anything its ancestors issued, however far
-- the standby lagged (2^32 grants of one resource on one timeline would be needed to reach the
-- next timeline's start). Timeline 1, every never-promoted cluster, keeps 1, 2, 3... The first
-- grant of a resource on a new timeline jumps; later ones count on by one. Past 2^53 - 1 (the
-- largest fence a JavaScript number holds exactly) a grant is refused (SE141) rather than handing
-- out a fence a worker would round. Same function names, arguments and results: workers of 0.1.0,
-- 0.2.0 and 0.3.0 call them unchanged and get the new fences.

-- The fence after p_current on the timeline this server writes. The timeline is read from the
-- name of the WAL file being written (its first eight hex digits), which changes at the promotion
-- itself, before any grant of the new primary: no start-up step, no table that a lagging standby
-- could also be missing. Only the schema's functions call it (they run as its owner). Like
-- 0018, the functions below do not restate SECURITY DEFINER: migrate() makes them so again and
-- takes EXECUTE from PUBLIC (secure_store_functions), which it skips for a function already so.
create function next_fence(p_current bigint) returns bigint
  language plpgsql
  set search_path from current
as $$
declare
  v_timeline bigint;
begin
  v_timeline := ('x' || pg_catalog.substr(
                   pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8)
                )::bit(32)::bigint;
  -- 2^21 timelines of 2^32 fences each fill the 2^53 a worker can hold exactly.
  if v_timeline > 2097152 or coalesce(p_current, 0) >= 9007199254740991 then
    raise exception using
      errcode = 'SE141',
      message = pg_catalog.format(
        'sideeffect: no fence after %s on timeline %s stays at or below 2^53 - 1',
        coalesce(p_current, 0), v_timeline),
      hint = 'Past 2^53 - 1 a worker would round the fence. Give a resource granted that often a new name; a cluster past timeline 2097152, a new store schema.';
  end if;
  return greatest(coalesce(p_current, 0) + 1, (v_timeline - 1) * 4294967296);
end
$$;

-- The grants, as the schema had them, each fence from next_fence() instead of one past the last.
create or replace function acquire(p_key text, p_resource text, p_digest bytea, p_retry_safety text, p_ttl_ms bigint, p_applying boolean, out o_outcome text, out o_fence bigint, out o_expires_at_ms bigint, out o_retry_after_ms bigint, out o_result bytea, out o_reason text) returns record
  language plpgsql
  set search_path from current
as $$
declare
  k keys;
  r resources;
  v_found boolean;
  v_now timestamptz;
  v_live boolean;
  v_expires_at timestamptz;
  v_to text := case when p_applying then 'applying' else 'held' end;
begin
  if pg_catalog.current_setting('lock_timeout') = '0' then
    -- A caller that set no bound of its own (a 0.1.0 worker): the call again, bounded like
    -- PgStore's default lockWaitMs, and a wait past it answered as a live lease is.
    perform pg_catalog.set_config('lock_timeout', '1000ms', true);
    begin
      select * into o_outcome, o_fence, o_expires_at_ms, o_retry_after_ms, o_result, o_reason
        from acquire(p_key, p_resource, p_digest, p_retry_safety, p_ttl_ms, p_applying);
    exception when lock_not_available then
      o_outcome := 'contended';
      o_retry_after_ms := 1000;
    end;
    perform pg_catalog.set_config('lock_timeout', '0', true);
    return;
  end if;

  -- Done, uncertain and a mismatched binding are answered from a plain read: a replay takes no lock.
  select * into k from keys where key = p_key;
  v_found := found;
  if not v_found
     or (k.resource = p_resource and k.digest = p_digest and k.state in ('free', 'held', 'applying'))
  then
    select * into r from resources where resource = p_resource for update;
    if not found then
      insert into resources (resource) values (p_resource) on conflict do nothing;
      select * into r from resources where resource = p_resource for update;
    end if;
    -- Under the lock the key may have moved on (completed, created by a concurrent first acquire).
    select * into k from keys where key = p_key for update;
    v_found := found;
  end if;

  if v_found then
    if k.resource <> p_resource then
      o_outcome := 'conflict:resource';
      return;
    elsif k.digest <> p_digest then
      o_outcome := 'conflict:payload';
      return;
    elsif k.state = 'done' then
      o_outcome := 'replayed';
      o_result := k.result;
      return;
    elsif k.state = 'uncertain' then
      o_outcome := 'uncertain';
      o_reason := coalesce(k.reason, '');
      return;
    end if;
  end if;

  -- From here on the resource row and the key row (if any) are locked.
  v_now := store_now();
  v_live := coalesce(r.expires_at > v_now, false);
  if v_found and k.state = 'applying' and not v_live and k.retry_safety <> 'safe' then
    -- The holder died or paused mid-apply: it may have applied. Block instead of re-applying.
    update keys set state = 'uncertain', reason = 'lease lost during apply', updated_at = v_now
     where key = p_key;
    insert into events (key, from_state, to_state, fence, reason, actor, at)
    values (p_key, 'applying', 'uncertain', k.fence, 'lease lost during apply', 'acquire', v_now);
    update resources set holder = null, expires_at = null
     where resource = p_resource and holder = p_key;
    o_outcome := 'uncertain';
    o_reason := 'lease lost during apply';
    return;
  end if;

  if v_live then
    o_outcome := 'contended';
    o_retry_after_ms := ceil(extract(epoch from r.expires_at - v_now) * 1000);
    return;
  end if;

  o_fence := next_fence(r.fence);
  if v_found then
    update keys set state = v_to, fence = o_fence, retry_safety = p_retry_safety, updated_at = v_now
     where key = p_key;
    insert into events (key, from_state, to_state, fence, reason, actor, at)
    values (p_key, k.state, v_to, o_fence, 'granted', 'acquire', v_now);
  else
    with created as (
      insert into keys (key, resource, digest, state, fence, retry_safety, updated_at)
      values (p_key, p_resource, p_digest, v_to, o_fence, p_retry_safety, v_now)
      on conflict (key) do nothing
      returning key
    )
    insert into events (key, from_state, to_state, fence, reason, actor, at)
    select key, 'free', v_to, o_fence, 'granted', 'acquire', v_now from created;
    if not found then
      -- Created meanwhile by an acquire on another resource (this one is locked by us).
      select * into k from keys where key = p_key;
      o_outcome := case when k.resource <> p_resource then 'conflict:resource'
                        else 'conflict:payload' end;
      o_fence := null;
      return;
    end if;
  end if;

  if r.holder <> p_key then
    perform conclude(r.holder, 'takeover', v_now);
  end if;
  v_expires_at := v_now + p_ttl_ms * interval '1 millisecond';
  update resources set fence = o_fence, holder = p_key, expires_at = v_expires_at
   where resource = p_resource;
  o_outcome := 'applied';
  o_expires_at_ms := epoch_ms(v_expires_at);
end
$$;

create or replace function acquire_batch(p_ords integer[], p_keys text[], p_resources text[], p_digests bytea[], p_retry_safeties text[], p_ttls_ms bigint[], p_applying boolean[], p_lock_timeout text) returns table (o_ord integer, o_outcome text, o_fence bigint, o_expires_at_ms bigint, o_retry_after_ms bigint, o_result bytea, o_reason text)
  language plpgsql
  set search_path from current
as $$
declare
  v_ord integer;
  v_granted integer[];
  v_fences bigint[];
  v_expires bigint[];
  v_busy text;
  -- A row of this statement was held past the caller's wait: no key after it waits for one.
  v_held boolean := false;
begin
  perform pg_catalog.set_config('lock_timeout', p_lock_timeout, true);
  begin
    -- acquire_fresh()'s grant, for the first call of each resource.
    with called as (
      select distinct on (p_resources[n.ord] collate "C") n.ord, p_keys[n.ord] as key,
             p_resources[n.ord] as resource
        from pg_catalog.unnest(p_ords) as n(ord)
       order by p_resources[n.ord] collate "C", n.ord
    ), unheld as (
      select r.resource from resources r
       where r.resource = any (array(select c.resource from called c)) and r.holder is null
       order by r.resource collate "C"
         for update skip locked
    ), granted as (
      update resources r
         set fence = next_fence(r.fence), holder = c.key,
             expires_at = store_now() + p_ttls_ms[c.ord] * interval '1 millisecond'
        from called c
       where r.resource = c.resource and r.resource in (select u.resource from unheld u)
         and r.holder is null
         and not exists (select from keys k where k.key = c.key)
      returning c.ord, r.fence, r.expires_at,
                r.expires_at - p_ttls_ms[c.ord] * interval '1 millisecond' as at
    ), created as (
      insert into keys (key, resource, digest, state, fence, retry_safety, updated_at,
                        granted_at, granted_state, granted_fence)
      select p_keys[g.ord], p_resources[g.ord], p_digests[g.ord], v.state, g.fence,
             p_retry_safeties[g.ord], g.at, g.at, v.state, g.fence
        from granted g,
             lateral (select case when p_applying[g.ord] then 'applying' else 'held' end
                      as state) v
      returning key
    )
    select pg_catalog.array_agg(g.ord), pg_catalog.array_agg(g.fence),
           pg_catalog.array_agg(epoch_ms(g.expires_at))
      into v_granted, v_fences, v_expires
      from granted g;
  exception when others then
    v_granted := null;
  end;
  v_granted := coalesce(v_granted, '{}');
  return query
    select g.ord, 'applied'::text, g.fence, g.expires_at_ms, null::bigint, null::bytea, null::text
      from rows from (pg_catalog.unnest(v_granted), pg_catalog.unnest(v_fences),
                      pg_catalog.unnest(v_expires)) as g(ord, fence, expires_at_ms);

  for v_ord in
    select n.ord from pg_catalog.unnest(p_ords) as n(ord)
     where n.ord <> all (v_granted)
     order by p_resources[n.ord] collate "C", n.ord
  loop
    o_ord := v_ord;
    o_outcome := 'again';
    o_fence := null;
    o_expires_at_ms := null;
    o_retry_after_ms := null;
    o_result := null;
    o_reason := null;
    -- The next keys of a resource whose row is held would find it held again: `held`, each.
    if p_resources[v_ord] is not distinct from v_busy then
      o_outcome := 'held';
    else
      begin
        if v_held then
          perform from resources r where r.resource = p_resources[v_ord] for update nowait;
        end if;
        select a.o_outcome, a.o_fence, a.o_expires_at_ms, a.o_retry_after_ms, a.o_result,
               a.o_reason
          into o_outcome, o_fence, o_expires_at_ms, o_retry_after_ms, o_result, o_reason
          from acquire_fresh(p_keys[v_ord], p_resources[v_ord], p_digests[v_ord],
                             p_retry_safeties[v_ord], p_ttls_ms[v_ord], p_applying[v_ord]) a;
      exception
        when lock_not_available then
          v_busy := p_resources[v_ord];
          v_held := true;
          o_outcome := 'held';
        when others then
          null;
      end;
    end if;
    return next;
  end loop;
end
$$;

create or replace function acquire_fresh(p_key text, p_resource text, p_digest bytea, p_retry_safety text, p_ttl_ms bigint, p_applying boolean, out o_outcome text, out o_fence bigint, out o_expires_at_ms bigint, out o_retry_after_ms bigint, out o_result bytea, out o_reason text) returns record
  language plpgsql
  set search_path from current
as $$
begin
  with granted as (
    update resources
       set fence = next_fence(fence), holder = p_key,
           expires_at = store_now() + p_ttl_ms * interval '1 millisecond'
     where resource = p_resource and holder is null
       and not exists (select from keys where key = p_key)
    returning fence, expires_at, expires_at - p_ttl_ms * interval '1 millisecond' as at
  ), created as (
    insert into keys (key, resource, digest, state, fence, retry_safety, updated_at,
                      granted_at, granted_state, granted_fence)
    select p_key, p_resource, p_digest, v.state, fence, p_retry_safety, at, at, v.state, fence
      from granted, (select case when p_applying then 'applying' else 'held' end as state) v
    returning key
  )
  select 'applied', granted.fence, epoch_ms(granted.expires_at)
    into o_outcome, o_fence, o_expires_at_ms
    from granted, created;
  if not found then
    select * into o_outcome, o_fence, o_expires_at_ms, o_retry_after_ms, o_result, o_reason
      from acquire(p_key, p_resource, p_digest, p_retry_safety, p_ttl_ms, p_applying);
  end if;
end
$$;

create or replace function tx_acquire(p_key text, p_resource text, p_digest bytea, out o_outcome text, out o_fence bigint, out o_retry_after_ms bigint, out o_result bytea, out o_reason text) returns record
  language plpgsql
  set search_path from current
as $$
declare
  k keys;
  r resources;
  v_now timestamptz;
begin
  select * into k from keys where key = p_key;
  if not found then
    -- The common case, a resource nobody holds: locked and its fence raised in one statement.
    update resources set fence = next_fence(fence)
     where resource = p_resource and holder is null
    returning fence into o_fence;
    if not found then
      select * into r from resources where resource = p_resource for update;
      if not found then
        insert into resources (resource) values (p_resource) on conflict do nothing;
        select * into r from resources where resource = p_resource for update;
      end if;
    end if;
    -- A transaction of the same key that held this lock before us may have committed it.
    select * into k from keys where key = p_key;
  end if;

  if k.key is not null then
    o_fence := null;
    if k.resource <> p_resource then
      o_outcome := 'conflict:resource';
    elsif k.digest <> p_digest then
      o_outcome := 'conflict:payload';
    elsif k.state = 'done' then
      o_outcome := 'replayed';
      o_result := k.result;
    elsif k.state = 'uncertain' then
      o_outcome := 'uncertain';
      o_reason := coalesce(k.reason, '');
    else
      raise exception 'sideeffect: transactional key % is %, which only a commit could have made',
        p_key, k.state;
    end if;
    return;
  end if;
  if o_fence is not null then
    o_outcome := 'applied';
    return;
  end if;

  -- The resource is new, or has a holder: judged as acquire judges it.
  v_now := store_now();
  if r.expires_at > v_now then
    o_outcome := 'contended';
    o_retry_after_ms := ceil(extract(epoch from r.expires_at - v_now) * 1000);
    return;
  end if;
  if r.holder is not null then
    -- An ordinary holder whose lease ran out: concluded as any takeover concludes it.
    perform conclude(r.holder, 'takeover', v_now);
  end if;
  o_fence := next_fence(r.fence);
  update resources set fence = o_fence, holder = null, expires_at = null
   where resource = p_resource;
  o_outcome := 'applied';
end
$$;

create or replace function tx_grant_fresh(p_key text, p_resource text, out o_fence bigint, out o_seen bigint) returns setof record
  language plpgsql
  set search_path from current
as $$
begin
  return query
  with granted as (
    update resources set fence = next_fence(fence)
     where resource = p_resource and holder is null and not exists (select from keys where key = p_key)
    returning fence, (select r.fence from resources r where r.resource = p_resource) as seen
  ), raised as (
    insert into sink_fences as sink (resource, fence) select p_resource, g.fence from granted g
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence)
  )
  select g.fence, g.seen from granted g;
end
$$;

-- The transactional grant: a fence other than the one after the statement's snapshot still means
-- another transaction moved the resource meanwhile.
create or replace function tx_open(p_key text, p_resource text, p_digest bytea, p_ttl text, p_lock_wait text, p_user text, p_search_path text, p_pooled boolean, out o_session text, out o_pid integer, out o_xid bigint, out o_temp bigint, out o_prepared bigint, out o_outcome text, out o_fence bigint, out o_retry_after_ms bigint, out o_result bytea, out o_reason text) returns record
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

  update resources set fence = next_fence(fence)
   where resource = p_resource and holder is null
     and not exists (select from keys where key = p_key)
  returning fence, (select r.fence from resources r where r.resource = p_resource)
    into o_fence, v_seen;
  if not found then
    select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
      into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
      from tx_acquire(p_key, p_resource, p_digest) a;
  elsif o_fence <> next_fence(v_seen) then
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

-- The burn after a rolled-back transactional grant moves the resource to the fence that grant had,
-- which is the one next_fence() gives after the fence the resource has now.
create or replace function tx_burn_fence(p_resource text, p_fence bigint) returns void
  language plpgsql
  set search_path from current
as $$
declare
  v_fence bigint;
  v_holder text;
  v_xmax bigint;
  v_next bigint;
  v_xid bigint;
  v_status text;
begin
  select fence, holder, xmax::text::bigint into v_fence, v_holder, v_xmax
    from resources where resource = p_resource;
  if not found then
    if p_fence = next_fence(0) then
      insert into resources (resource, fence) values (p_resource, p_fence) on conflict do nothing;
    end if;
    return;
  end if;
  if v_holder is not null or next_fence(v_fence) <> p_fence then
    return;
  end if;
  -- 0: nobody updated or locked the row since its last write. Read without a lock (a lock would
  -- make this transaction its xmax); the update below checks the fence again under its lock.
  if v_xmax = 0 then
    return;
  end if;
  -- The 32-bit xmax as a 64-bit transaction id: the epoch of the next one, one epoch back if it
  -- would lie ahead of it.
  v_next := pg_catalog.txid_snapshot_xmax(pg_catalog.txid_current_snapshot());
  v_xid := v_next - v_next % 4294967296 + v_xmax;
  if v_xid >= v_next then
    v_xid := v_xid - 4294967296;
  end if;
  begin
    v_status := pg_catalog.txid_status(v_xid);
  exception when others then
    -- Not a transaction id this cluster can judge (a multixact, or older than its clog).
    return;
  end;
  if v_status is distinct from 'aborted' then
    return;
  end if;
  update resources set fence = p_fence
   where resource = p_resource and holder is null and fence = v_fence;
end
$$;
