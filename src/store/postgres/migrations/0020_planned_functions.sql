-- sideeffect: backward-compatible
-- 0020: the last two store functions written in language sql, tx_grant_fresh() (the transactional
-- grant of 0.2.0 workers) and claim_reconciles() (the sweep leader's reconcile claims), in
-- plpgsql (issue 41). An SQL function that is not inlined is parsed and planned again at each
-- call; plpgsql keeps each statement's plan for the connection's life. Measured with
-- bench/transactional-ablation.ts: tx_grant_fresh() costs 165-178 µs of Postgres CPU per call in
-- plpgsql against 383-419 µs in sql. Same statements, same locks, same answers, same signatures:
-- nothing a worker of an earlier version calls changes.

create or replace function claim_reconciles(p_limit integer, p_restart_after_ms double precision)
  returns setof text
  language plpgsql
  set search_path from current
as $$
begin
  return query
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
    select c.key, c.fence, store_now() from candidates c
    on conflict (key) do update set fence = excluded.fence, started_at = excluded.started_at
      where r.fence <> excluded.fence
         or r.started_at <= excluded.started_at - p_restart_after_ms * interval '1 millisecond'
    returning r.key
  )
  select claimed.key from claimed;
end
$$;

create or replace function tx_grant_fresh(p_key text, p_resource text, out o_fence bigint, out o_seen bigint)
  returns setof record
  language plpgsql
  set search_path from current
as $$
begin
  return query
  with granted as (
    update resources set fence = fence + 1
     where resource = p_resource and holder is null and not exists (select from keys where key = p_key)
    returning fence, (select r.fence from resources r where r.resource = p_resource) as seen
  ), raised as (
    insert into sink_fences as sink (resource, fence) select p_resource, g.fence from granted g
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence)
  )
  select g.fence, g.seen from granted g;
end
$$;
