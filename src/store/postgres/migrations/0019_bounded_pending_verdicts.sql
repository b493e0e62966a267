-- sideeffect: backward-compatible
-- Pending verdicts, bounded and withdrawable. 20,000 verdicts pending on one attempt were
-- accepted in 9.5 s, `show` printed 12.6 MB of them and a worker judged them in 2,000 round trips;
-- now an attempt takes at most 100 still pending (the next is refused, recorded nowhere, and the
-- sender is told). A pending verdict can be withdrawn by whoever may record one, so a person who
-- finds another's pending verdict on the attempt they checked can take it back before it decides.
-- Backward-compatible: hold_verdict() keeps its signature and answers (plus `full`, which a 0.2.0
-- caller reports as an answer it does not know, holding nothing); 0.2.0 workers judge only
-- `pending` verdicts, so a withdrawn one is never judged by them.
alter table pending_verdicts drop constraint pending_verdicts_state_check;
alter table pending_verdicts add constraint pending_verdicts_state_check
  check (state in ('pending', 'accepted', 'refused', 'late', 'withdrawn'));

-- The verdicts still waiting on one attempt: counted by hold_verdict(), read by the worker's judge.
create index pending_verdicts_waiting on pending_verdicts (key, fence, id) where state = 'pending';

-- As 0010's, plus the bound: `full` when the attempt already has 100 pending verdicts. The key's
-- row is locked for update, so two verdicts held at once cannot both take the last place.
create or replace function hold_verdict(
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
  elsif (select pg_catalog.count(*) from pending_verdicts
          where key = p_key and fence = k.fence and state = 'pending') >= 100 then
    o_outcome := 'full';
    o_fence := k.fence;
    return;
  end if;
  v_now := store_now();
  insert into pending_verdicts (key, fence, applied, result, reason, actor, identity, at)
  values (p_key, k.fence, p_applied, case when p_applied then p_result end, p_reason, p_actor,
          p_identity, v_now)
  returning id into o_id;
  insert into events (key, from_state, to_state, fence, reason, actor, at, identity)
  values (p_key, 'uncertain', 'uncertain', k.fence,
          'verdict pending until a worker checks it ('
            || case when p_applied then 'applied' else 'not applied' end || '): ' || p_reason,
          p_actor, v_now, p_identity);
  o_outcome := 'held';
  o_fence := k.fence;
end
$$;

-- Withdraws a pending verdict of `p_key`: it becomes `withdrawn` with who and why, and an event
-- on the key says so (o_withdrawn). One judged (or withdrawn) before is answered as it stands; an
-- id of another key answers nothing.
create function withdraw_verdict(
  p_id bigint,
  p_key text,
  p_reason text,
  p_actor text,
  p_identity text,
  out o_state text,
  out o_why text,
  out o_withdrawn boolean
)
  language plpgsql
  security definer
  set search_path from current
as $$
declare
  v pending_verdicts;
  k keys;
  v_now timestamptz;
begin
  o_withdrawn := false;
  select * into v from pending_verdicts where id = p_id and key = p_key for update;
  if not found then
    return;
  elsif v.state <> 'pending' then
    o_state := v.state;
    o_why := v.why;
    return;
  end if;
  select * into k from keys where key = v.key for share;
  v_now := store_now();
  o_state := 'withdrawn';
  o_why := 'withdrawn by ' || p_actor || ': ' || p_reason;
  o_withdrawn := true;
  update pending_verdicts set state = o_state, why = o_why, judged_at = v_now where id = p_id;
  insert into events (key, from_state, to_state, fence, reason, actor, at, identity)
  values (v.key, k.state, k.state, v.fence,
          'pending verdict #' || p_id || ' withdrawn: ' || p_reason, p_actor, v_now, p_identity);
end
$$;

revoke execute on function withdraw_verdict(bigint, text, text, text, text) from public;
-- Whoever may hold a verdict may withdraw one.
do $$
declare
  v_role name;
begin
  for v_role in
    select distinct pg_catalog.pg_get_userbyid(acl.grantee)
      from pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) acl
     where p.oid = 'hold_verdict(text, boolean, bytea, text, text, bigint, text)'::pg_catalog.regprocedure
       and acl.privilege_type = 'EXECUTE' and acl.grantee <> 0
  loop
    execute pg_catalog.format(
      'grant execute on function withdraw_verdict(bigint, text, text, text, text) to %I', v_role);
  end loop;
end
$$;
