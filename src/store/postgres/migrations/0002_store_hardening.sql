-- Store hardening (0.2.0), upgrading a 0.1.0 schema in place: the tables keep their rows, two
-- functions change their judgement.
--
-- 1. The declaration that judges a dead attempt is the one it was granted with (keys.retry_safety,
--    written at every grant), whoever finds it: the same key's next acquire now reads it from the
--    key row, as conclude() (takeover, sweep) always did. In 0.1.0 that acquire judged by the NEW
--    caller's declaration, so a deploy that changed an effect's declaration changed the verdict.
-- 2. A resolution judges one episode: the fence of the uncertain attempt (keys.fence while the key
--    is uncertain). resolve_uncertain takes it and refuses a verdict for another episode as
--    `stale`; without one (a person typing by hand) it judges the current episode.

-- Store.acquire, as in 0001 except that an applying key whose lease ran out is judged by its
-- stored declaration (k.retry_safety), not p_retry_safety.
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

-- Store.resolveUncertain gains the episode: its out parameters change, so it is dropped and made
-- anew. p_fence defaults to null, so a 0.1.0 worker still running during a rolling upgrade (five
-- arguments) keeps working, judging the current episode as it always did.
drop function resolve_uncertain(text, boolean, bytea, text, text);

-- o_outcome: resolved | replayed (already done: o_result is its result) | not_uncertain (o_state
-- says what it is instead, 'unknown' if the key was never seen) | stale (p_fence names another
-- episode than the key's, o_fence; o_state is the key's state).
create function resolve_uncertain(
  p_key text,
  p_applied boolean,
  p_result bytea,
  p_reason text,
  p_actor text,
  p_fence bigint default null,
  out o_outcome text,
  out o_result bytea,
  out o_state text,
  out o_fence bigint
)
  language plpgsql
  set search_path from current
as $$
declare
  k keys;
  v_now timestamptz;
  v_to text := case when p_applied then 'done' else 'free' end;
begin
  select * into k from keys where key = p_key for update;
  if found and p_fence is not null and p_fence <> k.fence then
    o_outcome := 'stale';
    o_state := k.state;
    o_fence := k.fence;
    return;
  elsif k.state = 'done' then
    o_outcome := 'replayed';
    o_result := k.result;
    return;
  elsif k.state is distinct from 'uncertain' then
    o_outcome := 'not_uncertain';
    o_state := coalesce(k.state, 'unknown');
    return;
  end if;
  v_now := store_now();
  update keys
     set state = v_to,
         result = case when p_applied then p_result else result end,
         reason = case when p_applied then reason end,
         updated_at = v_now
   where key = p_key;
  insert into events (key, from_state, to_state, fence, reason, actor, at)
  values (p_key, 'uncertain', v_to, k.fence, p_reason, p_actor, v_now);
  o_outcome := 'resolved';
end
$$;
