-- sideeffect: backward-compatible
-- 0018 (issue 39): no function the runtime role may run raises a fence or a sink mark beyond what
-- the store issued for a real attempt; and a shared statement waits for no busy resource's row.
--
-- The first: tx_burn_fence() moved a free resource one step per call, so 200 calls raised its
-- fence by 200; raise_sink_mark(..., p_issued_here => false) raised a mark to any value, after
-- which every legitimate write of that resource was stale and its effect uncertain. Same names, arguments and results: workers of 0.2.0 call both unchanged.
--
-- The second: acquire_batch() and holder_batch() waited for each held resource row up to the
-- caller's first-look bound in turn, so 63 keys of resources whose rows transactional effects
-- held kept the statement, and the free key answered in it, 63 waits long (and a role's
-- statement_timeout cancelled it whole). Now one wait per statement at most: once a row was held
-- past the bound, every later key's resource row is taken without waiting (NOWAIT), and a held
-- one answers at once (a row held for a statement's few milliseconds is still waited for while
-- none was held past the bound, so contention costs no extra round trips). A held row answers
-- `again` for a holder's call, which the caller asks on its own, waiting there as it always did;
-- `held` for an acquire, whose caller then waits for the row on its own if it gets a place
-- (waitersPerResource) and is told `contended` otherwise, without a first look that would only
-- find the row held again. Same arguments and results; answers otherwise the same.

-- After work that rolled a transactional grant back (the store's txBurnFence): the resource moves
-- to the fence that grant had, which what the work wrote after its ROLLBACK may carry. Only when
-- that grant really happened and was rolled back: the resource's row still carries, as its xmax,
-- the transaction that updated it (a grant raises the fence in its own transaction) and that
-- transaction aborted. The burn's own update leaves a row no transaction rolled back, so a fence
-- is burnt once per rolled-back grant. A resource whose row the rolled-back grant created has no
-- row left: it gets fence 1 and nothing more. Someone holding it, or having moved it already:
-- nothing.
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
    if p_fence = 1 then
      insert into resources (resource, fence) values (p_resource, 1) on conflict do nothing;
    end if;
    return;
  end if;
  if v_holder is not null or v_fence <> p_fence - 1 then
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
   where resource = p_resource and holder is null and fence = p_fence - 1;
end
$$;

-- A sink mark raised (PgFencedSink, and a transactional grant's takeover), only to a fence the
-- store of THIS schema issued for the resource (SE131): a sink pointed at another schema than its
-- store's is refused at its first write instead of letting a paused holder's stale write land.
-- p_at_least: raise to at least p_fence (a read, or the grant; a probe's read may name the next
-- fence, one past the issued one); otherwise refuse a lower one. p_issued_here false (the sink's
-- data lives in another database than its store, PgFencedSink's separateDatabase) skips the check
-- only where it cannot be made: in a schema whose store never issued a fence. Where a store issues
-- fences, a mark above them is refused whatever the caller says. Returns the mark, or null when a
-- newer fence is recorded (nothing raised).
create or replace function raise_sink_mark(
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
  if (p_issued_here or v_issued is not null or exists (select from resources))
     and (v_issued is null or p_fence > v_issued + p_at_least::integer) then
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

-- acquire_batch() of 0015, with at most one wait for a held row; `held` where a key's resource
-- row (or a row its judgement needs) is held.
create or replace function acquire_batch(
  p_ords integer[],
  p_keys text[],
  p_resources text[],
  p_digests bytea[],
  p_retry_safeties text[],
  p_ttls_ms bigint[],
  p_applying boolean[],
  p_lock_timeout text
)
  returns table (
    o_ord integer,
    o_outcome text,
    o_fence bigint,
    o_expires_at_ms bigint,
    o_retry_after_ms bigint,
    o_result bytea,
    o_reason text
  )
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
         set fence = r.fence + 1, holder = c.key,
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

-- holder_batch() of 0015, with at most one wait for a held row.
create or replace function holder_batch(
  p_operation text,
  p_keys text[],
  p_resources text[],
  p_fences bigint[],
  p_ttls_ms bigint[],
  p_applying boolean[],
  p_results bytea[],
  p_reasons text[],
  p_lock_timeout text
)
  returns table (o_ord integer, o_outcome text, o_expires_at_ms bigint, o_result bytea)
  language plpgsql
  set search_path from current
as $$
declare
  v_ord integer;
  v_done integer[];
  v_busy text;
  -- A row of this statement was held past the caller's wait: no key after it waits for one.
  v_held boolean := false;
begin
  perform pg_catalog.set_config('lock_timeout', p_lock_timeout, true);
  if p_operation = 'complete' then
    begin
      with called as (
        select distinct on (p_resources[n.ord] collate "C") n.ord, p_keys[n.ord] as key,
               p_resources[n.ord] as resource, p_fences[n.ord] as fence
          from pg_catalog.generate_subscripts(p_keys, 1) as n(ord)
         order by p_resources[n.ord] collate "C", n.ord
      ), locked as (
        select r.resource from resources r
         where r.resource = any (array(select c.resource from called c))
         order by r.resource collate "C"
           for update skip locked
      ), released as (
        update resources r set holder = null, expires_at = null
          from called c
         where r.resource = c.resource and r.resource in (select l.resource from locked l)
           and r.fence = c.fence and r.holder = c.key
           and exists (select from keys k
                        where k.key = r.holder and k.fence = r.fence
                          and k.state in ('held', 'applying'))
        returning c.ord, c.key, c.fence, store_now() as at
      ), moved as (
        update keys k
           set state = 'done', result = p_results[rl.ord], updated_at = rl.at,
               completed_from = k.state
          from released rl
         where k.key = rl.key and k.fence = rl.fence
        returning rl.ord
      )
      select pg_catalog.array_agg(m.ord) into v_done from moved m;
    exception when others then
      v_done := null;
    end;
  end if;
  v_done := coalesce(v_done, '{}');
  return query
    select d.ord, 'completed'::text, null::bigint, null::bytea
      from pg_catalog.unnest(v_done) as d(ord);

  for v_ord in
    select n.ord from pg_catalog.generate_subscripts(p_keys, 1) as n(ord)
     where n.ord <> all (v_done)
     order by p_resources[n.ord] collate "C", n.ord
  loop
    o_ord := v_ord;
    o_outcome := 'again';
    o_expires_at_ms := null;
    o_result := null;
    -- The next keys of a resource whose row is held would find it held again.
    if p_resources[v_ord] is distinct from v_busy then
      begin
        if v_held then
          perform from resources r where r.resource = p_resources[v_ord] for update nowait;
        end if;
        case p_operation
          when 'renew' then
            select r.o_outcome, r.o_expires_at_ms into o_outcome, o_expires_at_ms
              from renew(p_keys[v_ord], p_resources[v_ord], p_fences[v_ord], p_ttls_ms[v_ord],
                         p_applying[v_ord]) r;
          when 'complete' then
            perform from complete_held(p_keys[v_ord], p_resources[v_ord], p_fences[v_ord],
                                       p_results[v_ord]);
            if found then
              o_outcome := 'completed';
            else
              select c.o_outcome, c.o_result into o_outcome, o_result
                from complete(p_keys[v_ord], p_resources[v_ord], p_fences[v_ord],
                              p_results[v_ord]) c;
            end if;
          when 'mark_uncertain' then
            o_outcome := mark_uncertain(p_keys[v_ord], p_resources[v_ord], p_fences[v_ord],
                                        p_reasons[v_ord]);
          when 'release' then
            o_outcome := release(p_keys[v_ord], p_resources[v_ord], p_fences[v_ord]);
        end case;
      exception
        when lock_not_available then
          v_busy := p_resources[v_ord];
          v_held := true;
        when others then
          null;
      end;
    end if;
    return next;
  end loop;
end
$$;
