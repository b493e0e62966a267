-- sideeffect: backward-compatible
-- 0015: many keys per statement (issue 33). A worker's concurrent calls of one kind that arrive
-- while a statement of that kind is in flight are sent together, as one statement: one round
-- trip and one commit for all of them instead of one each. Each key is answered exactly what the
-- one-key function answers:
--
-- - the common case (a key never seen granted on a free resource; a holder's complete) is
--   judged for the first call of each resource by one set-based statement, with the conditions
--   of the one-key function (acquire_fresh(), complete_held()); it waits for no row (a resource
--   row another transaction holds is left to the next step), and if it fails at all (a key
--   created meanwhile) it is rolled back as a whole and decides nothing;
-- - every other call is judged by the one-key function, one key after another in one order
--   everywhere, its resource's name (collation "C") then its place in the call: two batches never
--   wait for each other's rows in a cycle, and of two calls of one resource the first to arrive
--   is judged first (the second is then contended, as it would be one call at a time);
-- - each of those keys is judged in a block of its own: an error for one key (its row held past
--   the lock wait the caller set, a key created meanwhile on another resource, anything raised)
--   rolls back that key's work alone, and its row says `again`: the caller asks for that key
--   again on its own, which answers it as it always did. No key's failure fails the others. A
--   key whose resource's row was held past the wait leaves that resource's later keys to be
--   asked again on their own too, without waiting for the same row once each.
--
-- Also: complete_held() is plpgsql instead of SQL. Postgres plans a SQL function's body again on
-- every statement that calls it (it is not inlined: it writes, and runs with its owner's rights),
-- which was most of a complete's database time; a plpgsql function keeps its plan for the session.
-- Same name, arguments, result and judgement, so running workers' statements keep working.

create or replace function complete_held(p_key text, p_resource text, p_fence bigint, p_result bytea)
  returns setof integer
  language plpgsql
  set search_path from current
as $$
begin
  return query
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
  select 1 from moved;
end
$$;

-- Acquires of the keys at positions p_ords of the arrays (the others of the call were done keys,
-- answered by the caller's statement from a plain read). o_outcome as acquire_fresh(), or again.
create function acquire_batch(
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
    -- The next keys of a resource whose row was held past the wait would wait for it again.
    if p_resources[v_ord] is distinct from v_busy then
      begin
        select a.o_outcome, a.o_fence, a.o_expires_at_ms, a.o_retry_after_ms, a.o_result,
               a.o_reason
          into o_outcome, o_fence, o_expires_at_ms, o_retry_after_ms, o_result, o_reason
          from acquire_fresh(p_keys[v_ord], p_resources[v_ord], p_digests[v_ord],
                             p_retry_safeties[v_ord], p_ttls_ms[v_ord], p_applying[v_ord]) a;
      exception
        when lock_not_available then
          v_busy := p_resources[v_ord];
        when others then
          null;
      end;
    end if;
    return next;
  end loop;
end
$$;

-- A holder's calls of one kind (p_operation: renew, complete, mark_uncertain, release), one row
-- per key: o_outcome as the one-key function, or again. complete is complete_held(), set-based
-- first as in acquire_batch(), and where that moved nothing complete() judges it (a repeat, a
-- stale fence), as PgStore does in two statements for one key.
create function holder_batch(
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
    -- The next keys of a resource whose row was held past the wait would wait for it again.
    if p_resources[v_ord] is distinct from v_busy then
      begin
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
        when others then
          null;
      end;
    end if;
    return next;
  end loop;
end
$$;
