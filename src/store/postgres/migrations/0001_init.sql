-- The key state machine of DESIGN.md ("The key state machine"), one plpgsql function per atomic
-- Store operation. migrate() runs this file with search_path set to the target schema; every
-- function pins that search_path (`set search_path from current`), so names below resolve to
-- this schema whatever the caller's session says, and the file itself names no schema.
--
-- Verdicts the caller must act on (stale fence, key conflict, not uncertain) are returned as an
-- `o_outcome` value, never raised: an error would discard the pooled connection (pg-pool drops a
-- client on any query error), and a stale fence is routine under contention. No function writes
-- anything before it has decided to succeed, except that acquire may create an empty resource row
-- (fence 0, no holder), which means the same as no row at all.
--
-- Lock order, everywhere: the resource row first, then key rows bound to that resource. A key is
-- only locked under its own resource's lock (or alone, by resolve), so two operations never wait
-- on each other in a cycle.

-- The only clock of the store. Lease expiry is judged by the database, never by a worker whose
-- clock or scheduler may lag. clock_timestamp(), not now(): each function reads it after taking
-- its locks, so a grant that waited on a lock still gets its whole TTL.
create function store_now() returns timestamptz
  language sql volatile
  as $$ select clock_timestamp() $$;

create function epoch_ms(t timestamptz) returns bigint
  language sql immutable strict
  as $$ select floor(extract(epoch from t) * 1000)::bigint $$;

-- Per resource: a fence that only grows (never reset, never deleted) and at most one holder.
create table resources (
  resource text primary key,
  fence bigint not null default 0,
  holder text,
  expires_at timestamptz,
  check ((holder is null) = (expires_at is null))
);

-- Per key: its binding (resource + payload digest) and where it stands.
create table keys (
  key text primary key,
  resource text not null,
  digest bytea not null,
  state text not null check (state in ('free', 'held', 'applying', 'done', 'uncertain')),
  fence bigint not null,
  retry_safety text not null check (retry_safety in ('unknown', 'safe', 'unsafe')),
  result bytea,
  reason text,
  updated_at timestamptz not null
);

-- list({ state }) and purge() look keys up by state and age.
create index keys_state_updated_at on keys (state, updated_at);

-- Append-only: why each key was judged what it is.
create table events (
  id bigint generated always as identity,
  key text not null,
  from_state text not null,
  to_state text not null,
  fence bigint not null,
  reason text not null,
  actor text not null,
  at timestamptz not null,
  primary key (key, id)
);

-- The downstream side of the fence (PgFencedSink): the highest fence a write was accepted with,
-- per resource. Separate from resources.fence on purpose: it is what the downstream has seen.
create table sink_fences (
  resource text primary key,
  fence bigint not null
);

-- Ends the claim of a holder whose lease ran out (called under its resource's lock):
-- applying -> uncertain (free if declared safe), held -> free. Returns the new state, or null.
create function conclude(p_key text, p_actor text, p_now timestamptz) returns text
  language plpgsql
  set search_path from current
as $$
declare
  k keys;
  v_to text;
  v_reason text;
begin
  select * into k from keys where key = p_key for update;
  if k.state = 'applying' and k.retry_safety = 'safe' then
    v_to := 'free';
    v_reason := 'lease lost during apply; declared safe to re-apply';
  elsif k.state = 'applying' then
    v_to := 'uncertain';
    v_reason := 'lease lost during apply';
  elsif k.state = 'held' then
    v_to := 'free';
    v_reason := 'lease expired before apply';
  else
    return null;
  end if;
  update keys
     set state = v_to,
         reason = case when v_to = 'uncertain' then v_reason else reason end,
         updated_at = p_now
   where key = p_key;
  insert into events (key, from_state, to_state, fence, reason, actor, at)
  values (p_key, k.state, v_to, k.fence, v_reason, p_actor, p_now);
  return v_to;
end
$$;

-- Store.acquire. o_outcome: applied | replayed | uncertain | contended | conflict:resource |
-- conflict:payload.
create function acquire(
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
  if v_found and k.state = 'applying' and not v_live and p_retry_safety <> 'safe' then
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

-- The fence rule of renew, complete, mark_uncertain and release: the resource's current fence is
-- p_fence and p_key holds it (expired but not yet taken still counts). Each checks it with one
-- UPDATE of the resource row that matches only then: lock, check and write in one step. The key row
-- then needs no lock of its own: a held or applying key only moves under its resource's lock, and
-- the resource names its holder only while that key is held or applying at that fence (every
-- transition below keeps the two together). move_key() relies on that and says so if it fails.

-- Moves the holding key to p_to and records the event, in one statement.
create function move_key(
  p_key text, p_fence bigint, p_to text, p_result bytea, p_reason text, p_actor text,
  p_now timestamptz
) returns void
  language plpgsql
as $$
begin
  with old as (
    select state from keys where key = p_key and fence = p_fence and state in ('held', 'applying')
  ), moved as (
    update keys
       set state = p_to,
           result = coalesce(p_result, result),
           reason = case when p_to = 'uncertain' then p_reason else reason end,
           updated_at = p_now
     where key = p_key and fence = p_fence and state in ('held', 'applying')
    returning key
  )
  insert into events (key, from_state, to_state, fence, reason, actor, at)
  select p_key, old.state, p_to, p_fence, p_reason, p_actor, p_now from old, moved;
  if not found then
    raise exception 'sideeffect: key % holds its resource at fence % but is not held', p_key, p_fence;
  end if;
end
$$;

-- Store.renew. o_outcome: renewed | stale.
create function renew(
  p_key text,
  p_resource text,
  p_fence bigint,
  p_ttl_ms bigint,
  p_applying boolean,
  out o_outcome text,
  out o_expires_at_ms bigint
)
  language plpgsql
  set search_path from current
as $$
declare
  v_expires_at timestamptz;
begin
  update resources set expires_at = store_now() + p_ttl_ms * interval '1 millisecond'
   where resource = p_resource and fence = p_fence and holder = p_key
  returning expires_at into v_expires_at;
  if not found then
    o_outcome := 'stale';
    return;
  end if;
  if p_applying then
    with moved as (
      update keys set state = 'applying', updated_at = store_now()
       where key = p_key and state = 'held'
      returning updated_at
    )
    insert into events (key, from_state, to_state, fence, reason, actor, at)
    select p_key, 'held', 'applying', p_fence, 'prepared', 'renew', updated_at from moved;
  end if;
  o_outcome := 'renewed';
  o_expires_at_ms := epoch_ms(v_expires_at);
end
$$;

-- Store.complete. o_outcome: completed | replayed (a repeat: o_result is the first result) | stale.
create function complete(
  p_key text,
  p_resource text,
  p_fence bigint,
  p_result bytea,
  out o_outcome text,
  out o_result bytea
)
  language plpgsql
  set search_path from current
as $$
begin
  update resources set holder = null, expires_at = null
   where resource = p_resource and fence = p_fence and holder = p_key;
  if not found then
    select result into o_result from keys where key = p_key and state = 'done' and fence = p_fence;
    o_outcome := case when found then 'replayed' else 'stale' end;
    return;
  end if;
  perform move_key(p_key, p_fence, 'done', p_result, 'completed', 'complete', store_now());
  o_outcome := 'completed';
end
$$;

-- Store.markUncertain. Returns marked | stale; a repeat for the same fence is marked again (no-op).
create function mark_uncertain(p_key text, p_resource text, p_fence bigint, p_reason text)
  returns text
  language plpgsql
  set search_path from current
as $$
begin
  update resources set holder = null, expires_at = null
   where resource = p_resource and fence = p_fence and holder = p_key;
  if not found then
    perform from keys where key = p_key and state = 'uncertain' and fence = p_fence;
    return case when found then 'marked' else 'stale' end;
  end if;
  perform move_key(p_key, p_fence, 'uncertain', null, p_reason, 'markUncertain', store_now());
  return 'marked';
end
$$;

-- Store.release. Returns released | stale. A lease already released or completed (the resource
-- still at this fence, nobody or another key holding it) is released again, as a no-op.
create function release(p_key text, p_resource text, p_fence bigint) returns text
  language plpgsql
  set search_path from current
as $$
begin
  update resources set holder = null, expires_at = null
   where resource = p_resource and fence = p_fence and holder = p_key;
  if not found then
    perform from resources
     where resource = p_resource and fence = p_fence and holder is distinct from p_key;
    return case when found then 'released' else 'stale' end;
  end if;
  perform move_key(p_key, p_fence, 'free', null, 'released', 'release', store_now());
  return 'released';
end
$$;

-- Store.resolveUncertain. o_outcome: resolved | replayed (already done: o_result is its result) |
-- not_uncertain (o_state says what it is instead, 'unknown' if the key was never seen).
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
  set search_path from current
as $$
declare
  k keys;
  v_now timestamptz;
  v_to text := case when p_applied then 'done' else 'free' end;
begin
  select * into k from keys where key = p_key for update;
  if k.state = 'done' then
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

-- Store.sweep. Resources locked by a running operation are skipped: that operation concludes
-- them, or the next sweep does.
create function sweep(out o_uncertain text[], out o_freed text[])
  language plpgsql
  set search_path from current
as $$
declare
  v_now timestamptz := store_now();
  v_resource text;
  v_holder text;
  v_to text;
begin
  o_uncertain := '{}';
  o_freed := '{}';
  for v_resource, v_holder in
    select resource, holder from resources where expires_at <= v_now for update skip locked
  loop
    v_to := conclude(v_holder, 'sweep', v_now);
    if v_to = 'uncertain' then
      o_uncertain := o_uncertain || v_holder;
    elsif v_to = 'free' then
      o_freed := o_freed || v_holder;
    end if;
    update resources set holder = null, expires_at = null where resource = v_resource;
  end loop;
end
$$;

-- Store.purge: done keys unchanged for longer than p_older_than_ms, and their events. Never an
-- uncertain key, never a resource (its fence must not restart).
create function purge(p_older_than_ms bigint) returns bigint
  language sql
  set search_path from current
as $$
  with gone as (
    delete from keys
     where key in (
       select key from keys
        where state = 'done' and updated_at < store_now() - p_older_than_ms * interval '1 millisecond'
          for update skip locked)
    returning key
  ), dropped as (
    delete from events where key in (select key from gone)
  )
  select count(*) from gone
$$;
