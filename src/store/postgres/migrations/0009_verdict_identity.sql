-- sideeffect: backward-compatible
-- Who delivered a verdict, beside who it says decided: `actor` is the verdict's self-declared
-- `by` (free text), `identity` the Temporal identity that sent the signal or Update (the UI
-- user, the CLI's client) or that ran the CLI's store-only path. Null for every other event and
-- for verdicts recorded before this migration.
alter table events add column if not exists identity text;

-- resolve_uncertain with the delivering identity. A new overload, not a new default parameter: a
-- 6-argument call must keep resolving to exactly one function, for workers that still send it
-- (which is why this migration is backward-compatible: they keep working on it unchanged). Like
-- the 6-argument one since 0008: owner's rights, pinned search_path, no EXECUTE for PUBLIC.
create or replace function resolve_uncertain(
  p_key text,
  p_applied boolean,
  p_result bytea,
  p_reason text,
  p_actor text,
  p_fence bigint,
  p_identity text,
  out o_outcome text,
  out o_result bytea,
  out o_state text,
  out o_fence bigint
)
  language plpgsql
  security definer
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
  insert into events (key, from_state, to_state, fence, reason, actor, at, identity)
  values (p_key, 'uncertain', v_to, k.fence, p_reason, p_actor, v_now, p_identity);
  o_outcome := 'resolved';
end
$$;

-- The 0002 signature, same result type and rights (CREATE OR REPLACE keeps its grants but not
-- SECURITY DEFINER, so it is restated), now one logic with the overload above.
create or replace function resolve_uncertain(
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
  security definer
  set search_path from current
as $$
begin
  select r.o_outcome, r.o_result, r.o_state, r.o_fence
    into o_outcome, o_result, o_state, o_fence
    from resolve_uncertain(p_key, p_applied, p_result, p_reason, p_actor, p_fence, null::text) r;
end
$$;

revoke execute on function resolve_uncertain(text, boolean, bytea, text, text, bigint, text) from public;
-- Whoever may record a verdict today may record one with its identity.
do $$
declare
  v_role name;
begin
  for v_role in
    select distinct pg_catalog.pg_get_userbyid(acl.grantee)
      from pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) acl
     where p.oid = 'resolve_uncertain(text, boolean, bytea, text, text, bigint)'::pg_catalog.regprocedure
       and acl.privilege_type = 'EXECUTE' and acl.grantee <> 0
  loop
    execute pg_catalog.format(
      'grant execute on function resolve_uncertain(text, boolean, bytea, text, text, bigint, text) to %I',
      v_role);
  end loop;
end
$$;
