-- sideeffect: backward-compatible
-- Verdicts held for a worker's check. A verdict recorded without a worker (the CLI past its
-- --wait, Temporal down, no ReconcileWorkflow in the namespace) skipped the effect's `result`
-- check and decided the key at once, so a caller could be handed a result its own check refuses.
-- It is now held here, pinned to the attempt (fence) it judges, and decides the key only when a
-- worker has checked it (judge_verdict). Backward-compatible: nothing that existed changes, and
-- workers of 0.1.0 keep reading and resolving keys as before (they never judge a held verdict;
-- it waits for a worker of this version).
create table pending_verdicts (
  id bigint generated always as identity primary key,
  -- A purged key takes its held verdicts with it.
  key text not null references keys (key) on delete cascade,
  fence bigint not null,
  applied boolean not null,
  result bytea,
  reason text not null,
  actor text not null,
  identity text,
  state text not null default 'pending'
    check (state in ('pending', 'accepted', 'refused', 'late')),
  why text,
  at timestamptz not null,
  judged_at timestamptz
);
create index pending_verdicts_key on pending_verdicts (key, id);
create index pending_verdicts_pending on pending_verdicts (id) where state = 'pending';

-- Holds a verdict on an uncertain key, refused as resolve_uncertain refuses it (another attempt:
-- stale; a done key: replayed with its result; any other state: not_uncertain). The event says
-- it was held; the key itself does not change.
create function hold_verdict(
  p_key text,
  p_applied boolean,
  p_result bytea,
  p_reason text,
  p_actor text,
  p_fence bigint,
  p_identity text,
  out o_outcome text,
  out o_id bigint,
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
begin
  select * into k from keys where key = p_key for share;
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
  insert into pending_verdicts (key, fence, applied, result, reason, actor, identity, at)
  values (p_key, k.fence, p_applied, case when p_applied then p_result end, p_reason, p_actor,
          p_identity, v_now)
  returning id into o_id;
  insert into events (key, from_state, to_state, fence, reason, actor, at, identity)
  values (p_key, 'uncertain', 'uncertain', k.fence,
          'verdict held until a worker checks it ('
            || case when p_applied then 'applied' else 'not applied' end || '): ' || p_reason,
          p_actor, v_now, p_identity);
  o_outcome := 'held';
  o_fence := k.fence;
end
$$;

-- A worker's judgement of a held verdict, in one step: accepted, it is applied by
-- resolve_uncertain (first resolution wins, same attempt only); refused, it is marked so with why
-- and an event on the still uncertain key says so. Either way a verdict whose key was decided
-- first, or moved on to another attempt, becomes `late`. A verdict judged before is answered as it
-- stands.
create function judge_verdict(
  p_id bigint,
  p_accept boolean,
  p_why text,
  out o_state text,
  out o_why text
)
  language plpgsql
  security definer
  set search_path from current
as $$
declare
  v pending_verdicts;
  k keys;
  r record;
  v_now timestamptz;
begin
  select * into v from pending_verdicts where id = p_id for update;
  if not found then
    return;
  elsif v.state <> 'pending' then
    o_state := v.state;
    o_why := v.why;
    return;
  end if;
  select * into k from keys where key = v.key for update;
  v_now := store_now();
  if k.state is distinct from 'uncertain' or k.fence <> v.fence then
    o_state := 'late';
    o_why := case when k.fence <> v.fence
                  then 'the key moved on to attempt (fence) ' || k.fence
                  else 'the key was decided before this verdict was checked (state: '
                       || coalesce(k.state, 'unknown') || ')' end;
  elsif p_accept then
    select * into r
      from resolve_uncertain(v.key, v.applied, v.result, v.reason, v.actor, v.fence, v.identity);
    o_state := 'accepted';
  else
    o_state := 'refused';
    o_why := p_why;
    insert into events (key, from_state, to_state, fence, reason, actor, at, identity)
    values (v.key, 'uncertain', 'uncertain', v.fence, 'verdict refused: ' || p_why, v.actor,
            v_now, v.identity);
  end if;
  update pending_verdicts set state = o_state, why = o_why, judged_at = v_now where id = p_id;
end
$$;

revoke execute on function hold_verdict(text, boolean, bytea, text, text, bigint, text) from public;
revoke execute on function judge_verdict(bigint, boolean, text) from public;
-- Upgraded in place: whoever may record a verdict today may hold one, whoever may write keys
-- (the workers) may judge one, and whoever reads the events reads the held verdicts.
do $$
declare
  v_role name;
begin
  for v_role in
    select distinct pg_catalog.pg_get_userbyid(acl.grantee)
      from pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) acl
     where p.oid = 'resolve_uncertain(text, boolean, bytea, text, text, bigint, text)'::pg_catalog.regprocedure
       and acl.privilege_type = 'EXECUTE' and acl.grantee <> 0
  loop
    execute pg_catalog.format(
      'grant execute on function hold_verdict(text, boolean, bytea, text, text, bigint, text) to %I',
      v_role);
  end loop;
  for v_role in
    select distinct pg_catalog.pg_get_userbyid(acl.grantee)
      from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) acl
     where c.oid = 'keys'::pg_catalog.regclass and acl.privilege_type = 'UPDATE'
       and acl.grantee <> 0
  loop
    execute pg_catalog.format(
      'grant execute on function judge_verdict(bigint, boolean, text) to %I', v_role);
  end loop;
  for v_role in
    select distinct pg_catalog.pg_get_userbyid(acl.grantee)
      from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) acl
     where c.oid = 'events'::pg_catalog.regclass
       and acl.privilege_type = 'SELECT' and acl.grantee <> 0
  loop
    execute pg_catalog.format('grant select on table pending_verdicts to %I', v_role);
  end loop;
end
$$;
