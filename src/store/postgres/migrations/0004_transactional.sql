-- Transactional effects (Runner.executeInTransaction): acquire, the effect's own statements and
-- complete run in ONE transaction of the caller's, so these two functions never commit and never
-- publish an intermediate state. tx_acquire's write to the resource row (its fence) keeps that
-- row locked until the commit: that lock is the lease. Nobody else can see the key before it is
-- done, so it is written once, as done, with one event; a rollback leaves no trace at all. The
-- caller rolls back every answer but `applied`: none of them needs to keep a write.

-- o_outcome: applied (o_fence is the grant's fence, already the resource's) | replayed |
-- uncertain | contended | conflict:resource | conflict:payload.
create function tx_acquire(
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
  k keys;
  r resources;
  v_now timestamptz;
begin
  select * into k from keys where key = p_key;
  if not found then
    -- The common case, a resource nobody holds: locked and its fence raised in one statement.
    update resources set fence = fence + 1
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
  o_fence := r.fence + 1;
  update resources set fence = o_fence, holder = null, expires_at = null
   where resource = p_resource;
  o_outcome := 'applied';
end
$$;

-- Records the done key and its one event in the caller's transaction (the resource row is still
-- locked by tx_acquire). o_outcome: completed (o_at_ms: when, by the store's clock), or conflict
-- when a key of that name was committed meanwhile on another resource.
create function tx_complete(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_fence bigint,
  p_retry_safety text,
  p_result bytea,
  out o_outcome text,
  out o_at_ms bigint
)
  language plpgsql
  set search_path from current
as $$
declare
  v_now timestamptz := store_now();
begin
  with created as (
    insert into keys (key, resource, digest, state, fence, retry_safety, result, updated_at)
    values (p_key, p_resource, p_digest, 'done', p_fence, p_retry_safety, p_result, v_now)
    on conflict (key) do nothing
    returning key
  )
  insert into events (key, from_state, to_state, fence, reason, actor, at)
  select key, 'free', 'done', p_fence, 'applied in transaction', 'executeInTransaction', v_now
    from created;
  o_outcome := case when found then 'completed' else 'conflict' end;
  o_at_ms := epoch_ms(v_now);
end
$$;

-- Store.purge, one batch: at most p_limit done keys unchanged for longer than p_older_than_ms,
-- oldest first (the (state, updated_at) index), with their events, in one short transaction.
-- PgStore.purge repeats it until a batch comes back short, so purging millions of keys never
-- holds millions of row locks or one long transaction beside the executing callers. Keys locked
-- by a running operation are skipped. Never an uncertain key, never a resource.
create function purge_batch(p_older_than_ms bigint, p_limit int) returns bigint
  language sql
  set search_path from current
as $$
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
  select count(*) from gone
$$;
