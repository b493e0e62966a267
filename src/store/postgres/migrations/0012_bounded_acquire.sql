-- sideeffect: backward-compatible
-- 0012: a 0.1.0 worker's acquire waits for a busy resource at most 1 s (issue: a busy resource
-- stalls the worker). A transactional holder keeps its resource's row locked for its whole work;
-- this version's PgStore bounds every statement that may wait for that row (lockWaitMs), but a
-- 0.1.0 worker still running during a rolling upgrade calls acquire() with no bound at all, and
-- waited out the holder's whole transaction on one of its pool connections, for every caller of
-- that resource. acquire() now bounds itself when its caller did not (lock_timeout 0, Postgres's
-- default): 1 s, PgStore's default lockWaitMs, and past it the answer is `contended` with that
-- as the retry delay, which 0.1.0 handles as any live lease. A caller with a bound of its own
-- (this version's PgStore, through acquire_fresh()) is judged exactly as before. Same name,
-- arguments and results, so 0.1.0's statements keep working unchanged (which is why this
-- migration is backward-compatible).

-- Store.acquire, as in 0002, bounded for a caller with no lock_timeout.
create or replace function acquire(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_retry_safety text,
  p_ttl_ms bigint,
  p_applying boolean,
  out o_outcome text,
  out o_fence bigint,
  out o_expires_at_ms bigint,
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

  o_fence := r.fence + 1;
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
