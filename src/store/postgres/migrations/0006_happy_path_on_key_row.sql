-- 0006: the happy path writes fewer rows (issue: execute at the commit floor). Every key goes
-- through the same two transitions when nothing goes wrong: granted when new, completed by its
-- holder. Both are now recorded on the key row itself instead of as rows of `events`, and
-- PgStore.events() shows them in their place, exactly as the logged events read. Every other
-- transition (re-grants, renewals into applying, releases, leases lost, verdicts) is still logged
-- in `events`, as before. Rows written before this migration keep all their events in `events`:
-- the new columns stay null for them, and nothing is shown twice.
--
-- Also: epoch_ms() is stable, not immutable (its body reads the time zone setting), which is what
-- lets Postgres inline it into the calling statement; as immutable it ran as a separate SQL
-- function call, re-parsed on every statement that used it.

alter function epoch_ms(timestamptz) stable;

-- A key's first transition (free -> granted_state at granted_fence), when it was granted by
-- acquire_fresh() or committed by a transactional effect (granted_state 'done'); null otherwise.
alter table keys
  add column granted_at timestamptz,
  add column granted_state text,
  add column granted_fence bigint,
  -- The state its holder completed it from, when the completion was recorded on the row (by
  -- PgStore's complete statement); the completion's fence and time are the row's own.
  add column completed_from text;

-- acquire_fresh() as in 0005, except that the grant is recorded on the new key row instead of as an
-- events row (no released version calls it, so it is replaced in place). A key of this name
-- committed meanwhile on another resource makes the insert fail, and the whole call with it: the
-- caller asks again under the locks.
create or replace function acquire_fresh(
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
