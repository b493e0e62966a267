-- sideeffect: backward-compatible
-- 0025 (issue 47): the key row as the lease of a transactional effect. Until now a transactional
-- grant wrote its resource's row (the next fence) and held that row locked until its COMMIT, and
-- raised the resource's sink mark: two writes of shared rows per effect, each with its WAL, for a
-- lease the resource row has to carry only because plain grants read it there. Now every grant,
-- plain or transactional, of every version, first takes its resource's transaction-scoped
-- advisory lock. A transactional grant under the key-row lease takes only that
-- lock and reads the resource row (a live plain lease answers contended, an expired one is taken
-- over as before): its transaction holds the lock until it ends, and its key row, written at the
-- finish, is the only row it adds. Its fence comes from one sequence per store, laid out above
-- every fence of this timeline and the ones before it, so every grant on a resource still gets a
-- fence above every earlier one there; fences are no longer consecutive.
--
-- The lease is a setting (`settings.transactional_lease`): 'resource-row', as before, until an
-- operator switches it to 'key-row' (`sideeffect migrate --transactional-lease key-row`), once;
-- there is no way back, since a resource-row grant after key-row ones would count on from a fence
-- below theirs. The switch is safe with workers of 0.2.0 on running: every grant path of every
-- version is one of the functions below, replaced in place with the same names, arguments and
-- results. 0.3.0's and 0.4.0's transactional grant (tx_open(), tx_begin()) follows the setting;
-- 0.2.0's (tx_grant_fresh(), tx_acquire()) keeps writing the resource row, which its commit check
-- (tx_commits_its_key) needs, with its fence from the same sequence once switched.

-- Store-wide settings an operator changes through migrate(); read by the store's functions.
create table settings (
  name text primary key,
  value text not null
);
insert into settings (name, value) values ('transactional_lease', 'resource-row');

-- The key-row lease's fences: timeline * 2^40 + the next value. A crash takes a sequence back
-- only over values no committed transaction used (its WAL is flushed with the first commit after
-- them); a promotion can take it back further, but a promotion starts a new timeline.
create sequence fences minvalue 1 maxvalue 1099511627775 no cycle;

-- The fence the grant's transaction recorded with its grant: tx_record() checks the key-row
-- grant against it, having no resource row written in the transaction to check.
alter table tx_grants add column fence bigint;

-- Every grant takes its resource's lock first, held to the end of its transaction:
-- pg_advisory_xact_lock(1397048902, hashtext(resource)), the two-int4 form with a fixed class
-- (0x53454646, "SEFF"), out of the bigint space an application uses for its own advisory locks.
-- Two resources whose names hash alike share a lock: one waits for the other as for a live lease,
-- never longer than its lock wait. Written out in each function rather than called: a function
-- of the schema runs with its owner's rights and search_path, which costs each call.

-- 0022's next fence, or under the key-row lease the store's next: above p_current either way.
create or replace function next_fence(p_current bigint) returns bigint
  language plpgsql
  set search_path from current
as $$
declare
  v_timeline bigint;
  v_next bigint;
begin
  v_timeline := ('x' || pg_catalog.substr(
                   pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8)
                )::bit(32)::bigint;
  if exists (select from settings where name = 'transactional_lease' and value = 'key-row') then
    -- 2^13 timelines of 2^40 fences each fill the 2^53 a worker can hold exactly.
    if v_timeline < 8192 and coalesce(p_current, 0) < 9007199254740991 then
      begin
        v_next := pg_catalog.nextval('fences');
      exception when sequence_generator_limit_exceeded then
        v_next := null;
      end;
    end if;
    if v_next is null then
      raise exception using
        errcode = 'SE141',
        message = pg_catalog.format(
          'sideeffect: no fence after %s on timeline %s stays at or below 2^53 - 1',
          coalesce(p_current, 0), v_timeline),
        hint = 'Past 2^53 - 1 a worker would round the fence. The key-row lease has 2^40 fences per timeline and 8191 timelines; past them, a new store schema.';
    end if;
    return greatest(coalesce(p_current, 0) + 1, v_timeline * 1099511627776 + v_next);
  end if;
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

-- The transactional grant under the key-row lease: the resource's lock, then the resource row
-- read as a plain grant left it. No resource row is written unless an expired plain lease is
-- taken over, and the sink mark is raised only where a sink or a plain holder may still write.
create function tx_lease(
  p_key text,
  p_resource text,
  p_digest bytea,
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
  r resources;
  v_now timestamptz;
begin
  perform pg_catalog.pg_advisory_xact_lock(1397048902, pg_catalog.hashtext(p_resource));
  -- A key committed before the lock was taken (by a caller that held it) is judged as a waiter
  -- judges it.
  perform from keys where key = p_key;
  if found then
    select a.o_outcome, a.o_result, a.o_reason into o_outcome, o_result, o_reason
      from tx_recheck(p_key, p_resource, p_digest, null) a;
    return;
  end if;
  if pg_catalog.current_setting('transaction_isolation') = 'read committed' then
    select * into r from resources where resource = p_resource;
  else
    -- The transaction's snapshot was taken before the lock, and misses a plain grant committed
    -- since: locking the row it updated, or inserting the row it created, then fails as a
    -- serialization failure, and the attempt runs again.
    select * into r from resources where resource = p_resource for key share;
    if not found then
      insert into resources (resource) values (p_resource) on conflict do nothing;
    end if;
  end if;
  if r.holder is not null then
    v_now := store_now();
    if r.expires_at <= v_now then
      select * into r from resources where resource = p_resource for update;
    end if;
    if r.expires_at > v_now then
      o_outcome := 'contended';
      o_retry_after_ms := ceil(extract(epoch from r.expires_at - v_now) * 1000);
      return;
    end if;
    if r.holder is not null then
      -- A plain holder whose lease ran out: concluded as any takeover concludes it.
      perform conclude(r.holder, 'takeover', v_now);
      update resources set holder = null, expires_at = null where resource = p_resource;
    end if;
  end if;
  o_fence := next_fence(r.fence);
  o_outcome := 'applied';
  -- A plain holder's late write through a PgFencedSink, or any holder's where a sink is used,
  -- must not land after this grant's: the mark goes up as before. A resource only transactional
  -- effects ever held, and no sink wrote, has no mark to raise.
  if r.fence > 0 or exists (select from sink_fences s where s.resource = p_resource) then
    insert into sink_fences as sink (resource, fence) values (p_resource, o_fence)
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence);
  end if;
end
$$;

-- The grants, as 0022 and 0023 left them, each taking its resource's lock first: waiting for it
-- where it waits for the resource, or trying it in the statement that grants without waiting (a
-- grant that does not get it goes on to the path that waits).
-- tx_open() and tx_begin() take the key-row lease once it is set, and record their fence.

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
    perform pg_catalog.pg_advisory_xact_lock(1397048902, pg_catalog.hashtext(p_resource));
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
       and pg_catalog.pg_try_advisory_xact_lock(1397048902, pg_catalog.hashtext(p_resource))
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

create or replace function acquire_batch(p_ords integer[], p_keys text[], p_resources text[], p_digests bytea[], p_retry_safeties text[], p_ttls_ms bigint[], p_applying boolean[], p_lock_timeout text) returns table (o_ord integer, o_outcome text, o_fence bigint, o_expires_at_ms bigint, o_retry_after_ms bigint, o_result bytea, o_reason text)
  language plpgsql
  set search_path from current
as $$
declare
  v_ord integer;
  v_granted integer[];
  v_fences bigint[];
  v_expires bigint[];
  -- The rows the set-based grant locked: taken before their advisory locks, so never waited for.
  v_locked text[];
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
         and pg_catalog.pg_try_advisory_xact_lock(1397048902, pg_catalog.hashtext(r.resource))
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
           pg_catalog.array_agg(epoch_ms(g.expires_at)),
           array(select u.resource from unheld u)
      into v_granted, v_fences, v_expires, v_locked
      from granted g;
  exception when others then
    v_granted := null;
    v_locked := null;
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
          if not pg_catalog.pg_try_advisory_xact_lock(1397048902, pg_catalog.hashtext(p_resources[v_ord])) then
            raise exception using errcode = 'lock_not_available';
          end if;
        elsif p_resources[v_ord] = any (v_locked)
              and not pg_catalog.pg_try_advisory_xact_lock(1397048902, pg_catalog.hashtext(p_resources[v_ord])) then
          -- A grant elsewhere has the advisory lock and goes on to this row, which this statement
          -- holds: waiting for it here would be a deadlock until the lock wait ran out.
          raise exception using errcode = 'lock_not_available';
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

create or replace function tx_acquire(p_key text, p_resource text, p_digest bytea, out o_outcome text, out o_fence bigint, out o_retry_after_ms bigint, out o_result bytea, out o_reason text) returns record
  language plpgsql
  set search_path from current
as $$
declare
  k keys;
  r resources;
  v_now timestamptz;
begin
  perform pg_catalog.pg_advisory_xact_lock(1397048902, pg_catalog.hashtext(p_resource));
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
       and pg_catalog.pg_try_advisory_xact_lock(1397048902, pg_catalog.hashtext(p_resource))
    returning fence, (select r.fence from resources r where r.resource = p_resource) as seen
  ), raised as (
    insert into sink_fences as sink (resource, fence) select p_resource, g.fence from granted g
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence)
  )
  select g.fence, g.seen from granted g;
end
$$;

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

  if exists (select from settings where name = 'transactional_lease' and value = 'key-row') then
    select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
      into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
      from tx_lease(p_key, p_resource, p_digest) a;
  else
    update resources set fence = next_fence(fence)
     where resource = p_resource and holder is null
       and not exists (select from keys where key = p_key)
       and pg_catalog.pg_try_advisory_xact_lock(1397048902, pg_catalog.hashtext(p_resource))
    returning fence, (select r.fence from resources r where r.resource = p_resource)
      into o_fence, v_seen;
    if found and o_fence = next_fence(v_seen) then
      o_outcome := 'applied';
    elsif found then
      select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
        into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
        from tx_recheck(p_key, p_resource, p_digest, o_fence) a;
    else
      select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
        into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
        from tx_acquire(p_key, p_resource, p_digest) a;
    end if;
    if o_outcome = 'applied' then
      insert into sink_fences as sink (resource, fence) values (p_resource, o_fence)
      on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence);
    end if;
  end if;
  if o_outcome = 'applied' then
    insert into tx_grants (xid, key, synchronous_commit, session_replication_role, fence)
    values (o_xid, p_key, pg_catalog.current_setting('synchronous_commit'),
            pg_catalog.current_setting('session_replication_role'), o_fence);
  end if;
  v_set := pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
end
$$;

create or replace function tx_begin(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_ttl text,
  p_lock_wait text,
  p_user text,
  p_search_path text,
  p_session boolean,
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
  if p_session then
    o_session := tx_session_mark(p_user, p_search_path);
    o_temp := tx_temp_relations();
    o_prepared := tx_sql_prepared();
  end if;
  o_pid := pg_catalog.pg_backend_pid();
  o_xid := pg_catalog.txid_current();
  v_set := tx_bounds(p_key, p_ttl, p_ttl) || pg_catalog.set_config('lock_timeout', p_lock_wait, true);

  if exists (select from settings where name = 'transactional_lease' and value = 'key-row') then
    select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
      into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
      from tx_lease(p_key, p_resource, p_digest) a;
  else
    update resources set fence = next_fence(fence)
     where resource = p_resource and holder is null
       and not exists (select from keys where key = p_key)
       and pg_catalog.pg_try_advisory_xact_lock(1397048902, pg_catalog.hashtext(p_resource))
    returning fence, (select r.fence from resources r where r.resource = p_resource)
      into o_fence, v_seen;
    if found and o_fence = next_fence(v_seen) then
      o_outcome := 'applied';
    elsif found then
      select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
        into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
        from tx_recheck(p_key, p_resource, p_digest, o_fence) a;
    else
      select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
        into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
        from tx_acquire(p_key, p_resource, p_digest) a;
    end if;
    if o_outcome = 'applied' then
      insert into sink_fences as sink (resource, fence) values (p_resource, o_fence)
      on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence);
    end if;
  end if;
  if o_outcome = 'applied' then
    insert into tx_grants (xid, key, synchronous_commit, session_replication_role, fence)
    values (o_xid, p_key, pg_catalog.current_setting('synchronous_commit'),
            pg_catalog.current_setting('session_replication_role'), o_fence);
  end if;
  v_set := pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
end
$$;

-- tx_record() (0013) checks a grant of 0.3.0 on against its tx_grants row.
create or replace function tx_record(
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
  -- The grant's own row (0.3.0 on), or, for a 0.2.0 worker's grant, the resource row it wrote.
  perform from tx_grants g where g.xid = p_xid and g.key = p_key and g.fence = p_fence;
  if not found then
    perform from resources r
     where r.resource = p_resource and r.fence = p_fence and r.holder is null
       and r.xmin::text = (p_xid % 4294967296)::text;
  end if;
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
