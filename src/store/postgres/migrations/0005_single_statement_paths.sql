-- 0005: the common paths in fewer statements (issue: execute at the commit floor). A key never
-- seen, on a resource nobody holds, is granted by acquire_fresh() in one statement; complete is a
-- single SQL statement sent by PgStore, with no function call at all. The 0001-0004 functions
-- stay, unchanged, for every other case (and for workers of earlier versions during a rolling
-- upgrade).
--
-- PgStore's complete statement asks move_key() to raise when a resource names a holder whose key
-- is not held (the invariant every transition keeps), so that release is rolled back as before.
-- Called from a statement rather than from a function of this schema, move_key must find its
-- tables by itself.
alter function move_key(text, bigint, text, bytea, text, text, timestamptz) set search_path from current;

-- acquire() with the common case first: a key never seen, on a resource nobody holds, granted
-- in one statement (fence raised and lease taken by the UPDATE's row lock, key created, grant
-- logged). Anything else (the UPDATE matched nothing, so nothing was written) goes to acquire().
-- The lease's clock is read in the SET, which Postgres evaluates again if the UPDATE waited for
-- the row, so a grant keeps its whole TTL. A key of this name committed meanwhile on another
-- resource makes the insert fail, and the whole call with it: the caller asks again.
create function acquire_fresh(
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
begin
  with granted as (
    update resources
       set fence = fence + 1, holder = p_key,
           expires_at = store_now() + p_ttl_ms * interval '1 millisecond'
     where resource = p_resource and holder is null
       and not exists (select from keys where key = p_key)
    returning fence, expires_at
  ), created as (
    insert into keys (key, resource, digest, state, fence, retry_safety, updated_at)
    select p_key, p_resource, p_digest, case when p_applying then 'applying' else 'held' end,
           fence, p_retry_safety, expires_at - p_ttl_ms * interval '1 millisecond'
      from granted
    returning key, state, fence, updated_at
  ), logged as (
    insert into events (key, from_state, to_state, fence, reason, actor, at)
    select key, 'free', state, fence, 'granted', 'acquire', updated_at from created
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
