-- sideeffect: backward-compatible
-- 0021: a breaker per provider group (issue 42). When a provider takes requests and then times
-- out, every attempt becomes uncertain and waits for a person; N uncertain outcomes of a group
-- within a window now open its breaker, and no new attempt of the group starts until one, after a
-- cool-down, goes through and applies. The state lives here, judged by the store's clock under the
-- group's row lock, so every worker sees one breaker and exactly one half-open attempt goes
-- through across them. Only new tables and functions: workers of 0.1.0 and 0.2.0 never call them
-- and keep working unchanged (they ignore breakers: a mixed fleet is not protected).
-- The state machine is src/core/breaker.ts's BreakerMachine (the MemoryStore's); the two agree.
create table breakers (
  grp text primary key,
  state text not null default 'closed' check (state in ('closed', 'open', 'half-open')),
  since timestamptz not null,
  reason text not null,
  actor text not null,
  identity text,
  -- A person moved it: a person's open holds until a person closes it.
  manual boolean not null default false,
  -- Open: when one attempt may go through; half-open: when the probe's slot runs out.
  until timestamptz,
  cool_down_ms bigint not null default 0,
  window_ms bigint not null default 60000,
  probe_key text
);

-- Uncertain outcomes counted while closed, one per attempt (key, fence); a close empties them.
create table breaker_outcomes (
  grp text not null references breakers (grp) on delete cascade,
  key text not null,
  fence bigint not null,
  at timestamptz not null,
  primary key (grp, key, fence)
);

create table breaker_events (
  id bigint generated always as identity primary key,
  grp text not null,
  from_state text not null,
  to_state text not null,
  reason text not null,
  actor text not null,
  identity text,
  -- The role Postgres authenticated for the session, chosen by nobody who calls the store.
  db_user text not null default session_user,
  at timestamptz not null
);
create index breaker_events_grp on breaker_events (grp, id);

-- The record every breaker function answers: the row as people read it, with the uncertain
-- outcomes counted now (within the window, since the last close).
create function breaker_answer(
  p_group text,
  out o_group text,
  out o_state text,
  out o_since_ms bigint,
  out o_reason text,
  out o_by text,
  out o_identity text,
  out o_manual boolean,
  out o_uncertain bigint,
  out o_until_ms bigint,
  out o_cool_ms bigint,
  out o_probe_key text
)
  language sql
  set search_path from current
as $$
  select b.grp, b.state, epoch_ms(b.since), b.reason, b.actor, b.identity, b.manual,
         (select pg_catalog.count(*) from breaker_outcomes o
           where o.grp = b.grp
             and o.at > store_now() - b.window_ms * interval '1 millisecond'),
         epoch_ms(b.until), b.cool_down_ms, b.probe_key
    from breakers b where b.grp = p_group
$$;

-- One transition, logged. Internal: callable by no role but the owner (the functions below run
-- with the owner's rights); it moves a breaker without the checks of its callers.
create function breaker_move(
  p_group text,
  p_to text,
  p_reason text,
  p_actor text,
  p_identity text,
  p_now timestamptz
) returns text
  language plpgsql
  security definer
  set search_path from current
as $$
declare
  v_from text;
begin
  select state into v_from from breakers where grp = p_group;
  update breakers
     set state = p_to, since = p_now, reason = p_reason, actor = p_actor, identity = p_identity,
         manual = false, probe_key = null, until = null
   where grp = p_group;
  insert into breaker_events (grp, from_state, to_state, reason, actor, identity, at)
  values (p_group, v_from, p_to, p_reason, p_actor, p_identity, p_now);
  if p_to = 'closed' then
    delete from breaker_outcomes where grp = p_group;
  end if;
  return v_from;
end
$$;
revoke execute on function breaker_move(text, text, text, text, text, timestamptz) from public;

-- Asked once a new attempt holds its lease, before it touches the provider. Closed (or never
-- seen): admitted, nothing written, no lock taken. Open past its cool-down (not by a person), or
-- half-open with the probe's slot run out (or this key already the probe): this attempt is the
-- probe, for at most one cool-down. Otherwise refused until o_retry_at_ms.
create function breaker_admit(
  p_group text,
  p_key text,
  p_cool_ms bigint,
  out o_admitted boolean,
  out o_probe boolean,
  out o_retry_at_ms bigint,
  out o_retry_after_ms bigint,
  out o_from text,
  out o_group text,
  out o_state text,
  out o_since_ms bigint,
  out o_reason text,
  out o_by text,
  out o_identity text,
  out o_manual boolean,
  out o_uncertain bigint,
  out o_until_ms bigint,
  out o_cool_ms bigint,
  out o_probe_key text
)
  language plpgsql
  set search_path from current
as $$
declare
  b breakers;
  v_now timestamptz;
begin
  o_admitted := true;
  o_probe := false;
  select * into b from breakers where grp = p_group;
  if not found or b.state = 'closed' then
    return;
  end if;
  select * into b from breakers where grp = p_group for update;
  if b.state = 'closed' then
    return;
  end if;
  v_now := store_now();
  if b.state = 'open' and not b.manual and b.until <= v_now then
    o_from := breaker_move(p_group, 'half-open', 'cool-down over: one attempt goes through',
                           'breaker', null, v_now);
    update breakers set probe_key = p_key, until = v_now + cool_down_ms * interval '1 millisecond'
     where grp = p_group;
    o_probe := true;
  elsif b.state = 'half-open' and (b.probe_key = p_key or b.until <= v_now) then
    update breakers set probe_key = p_key, until = v_now + cool_down_ms * interval '1 millisecond'
     where grp = p_group;
    o_probe := true;
  else
    o_admitted := false;
    o_retry_at_ms := epoch_ms(coalesce(b.until, v_now + p_cool_ms * interval '1 millisecond'));
    o_retry_after_ms := o_retry_at_ms - epoch_ms(v_now);
  end if;
  select a.o_group, a.o_state, a.o_since_ms, a.o_reason, a.o_by, a.o_identity, a.o_manual,
         a.o_uncertain, a.o_until_ms, a.o_cool_ms, a.o_probe_key
    into o_group, o_state, o_since_ms, o_reason, o_by, o_identity, o_manual, o_uncertain,
         o_until_ms, o_cool_ms, o_probe_key
    from breaker_answer(p_group) a;
end
$$;

-- How an admitted attempt ended. The probe's: applied closes, uncertain re-opens with the
-- cool-down doubled (at most p_max_cool_ms), released frees its slot. Any other attempt's
-- uncertain outcome counts while closed (once per key and fence), and the threshold-th within
-- the window opens the breaker for p_cool_ms.
create function breaker_record(
  p_group text,
  p_key text,
  p_fence bigint,
  p_outcome text,
  p_threshold integer,
  p_window_ms bigint,
  p_cool_ms bigint,
  p_max_cool_ms bigint,
  out o_from text,
  out o_group text,
  out o_state text,
  out o_since_ms bigint,
  out o_reason text,
  out o_by text,
  out o_identity text,
  out o_manual boolean,
  out o_uncertain bigint,
  out o_until_ms bigint,
  out o_cool_ms bigint,
  out o_probe_key text
)
  language plpgsql
  set search_path from current
as $$
declare
  b breakers;
  v_now timestamptz := store_now();
  v_count bigint;
  v_cool bigint;
begin
  if p_outcome not in ('uncertain', 'applied', 'released') then
    raise exception using errcode = '22023',
      message = pg_catalog.format('sideeffect: breaker outcome %s is not uncertain, applied or released', p_outcome);
  end if;
  insert into breakers (grp, since, reason, actor, window_ms)
  values (p_group, v_now, 'no uncertain outcomes yet', 'breaker', p_window_ms)
  on conflict (grp) do nothing;
  select * into b from breakers where grp = p_group for update;
  if b.window_ms <> p_window_ms then
    update breakers set window_ms = p_window_ms where grp = p_group;
  end if;
  if b.state = 'half-open' and b.probe_key = p_key then
    if p_outcome = 'applied' then
      o_from := breaker_move(p_group, 'closed', 'the half-open attempt applied', 'breaker', null,
                             v_now);
    elsif p_outcome = 'uncertain' then
      v_cool := least(b.cool_down_ms * 2, p_max_cool_ms);
      o_from := breaker_move(p_group, 'open',
                             pg_catalog.format('the half-open attempt %s ended uncertain', p_key),
                             'breaker', null, v_now);
      update breakers set cool_down_ms = v_cool, until = v_now + v_cool * interval '1 millisecond'
       where grp = p_group;
    else
      update breakers set until = v_now where grp = p_group;
    end if;
  elsif p_outcome = 'uncertain' and b.state = 'closed' then
    insert into breaker_outcomes (grp, key, fence, at) values (p_group, p_key, p_fence, v_now)
    on conflict do nothing;
    delete from breaker_outcomes
     where grp = p_group and at <= v_now - p_window_ms * interval '1 millisecond';
    select pg_catalog.count(*) into v_count from breaker_outcomes where grp = p_group;
    if v_count >= p_threshold then
      o_from := breaker_move(p_group, 'open',
                             pg_catalog.format('%s uncertain outcomes within %s ms (threshold %s), the last %s',
                                               v_count, p_window_ms, p_threshold, p_key),
                             'breaker', null, v_now);
      update breakers
         set cool_down_ms = p_cool_ms, until = v_now + p_cool_ms * interval '1 millisecond'
       where grp = p_group;
    end if;
  end if;
  select a.o_group, a.o_state, a.o_since_ms, a.o_reason, a.o_by, a.o_identity, a.o_manual,
         a.o_uncertain, a.o_until_ms, a.o_cool_ms, a.o_probe_key
    into o_group, o_state, o_since_ms, o_reason, o_by, o_identity, o_manual, o_uncertain,
         o_until_ms, o_cool_ms, o_probe_key
    from breaker_answer(p_group) a;
end
$$;

-- A person's open (holds until a person closes it) or close (the count starts again), with who
-- says so recorded as a verdict's is.
create function breaker_set(
  p_group text,
  p_open boolean,
  p_reason text,
  p_by text,
  p_identity text,
  out o_from text,
  out o_group text,
  out o_state text,
  out o_since_ms bigint,
  out o_reason text,
  out o_by text,
  out o_identity text,
  out o_manual boolean,
  out o_uncertain bigint,
  out o_until_ms bigint,
  out o_cool_ms bigint,
  out o_probe_key text
)
  language plpgsql
  set search_path from current
as $$
declare
  v_now timestamptz := store_now();
begin
  insert into breakers (grp, since, reason, actor)
  values (p_group, v_now, 'no uncertain outcomes yet', 'breaker')
  on conflict (grp) do nothing;
  perform from breakers where grp = p_group for update;
  o_from := breaker_move(p_group, case when p_open then 'open' else 'closed' end, p_reason, p_by,
                         p_identity, v_now);
  update breakers set manual = true where grp = p_group;
  select a.o_group, a.o_state, a.o_since_ms, a.o_reason, a.o_by, a.o_identity, a.o_manual,
         a.o_uncertain, a.o_until_ms, a.o_cool_ms, a.o_probe_key
    into o_group, o_state, o_since_ms, o_reason, o_by, o_identity, o_manual, o_uncertain,
         o_until_ms, o_cool_ms, o_probe_key
    from breaker_answer(p_group) a;
end
$$;

-- Every group's breaker, by name.
create function breaker_list(
  out o_group text,
  out o_state text,
  out o_since_ms bigint,
  out o_reason text,
  out o_by text,
  out o_identity text,
  out o_manual boolean,
  out o_uncertain bigint,
  out o_until_ms bigint,
  out o_cool_ms bigint,
  out o_probe_key text
)
  returns setof record
  language sql
  set search_path from current
as $$
  select a.* from breakers b, breaker_answer(b.grp) a order by b.grp
$$;

-- A group's transitions, oldest first.
create function breaker_history(
  p_group text,
  out o_from text,
  out o_to text,
  out o_reason text,
  out o_by text,
  out o_identity text,
  out o_at_ms bigint
)
  returns setof record
  language sql
  set search_path from current
as $$
  select from_state, to_state, reason, actor, identity, epoch_ms(at)
    from breaker_events where grp = p_group order by id
$$;

-- Upgraded in place: whoever may record a verdict (the operator's CLI) may list and move
-- breakers, and whoever reads the events reads the breakers. The workers' roles are given the
-- functions by secure_store_functions(), which migrate() runs after this migration.
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
      'grant execute on function breaker_set(text, boolean, text, text, text), breaker_list(), breaker_history(text), breaker_answer(text) to %I',
      v_role);
  end loop;
  for v_role in
    select distinct pg_catalog.pg_get_userbyid(acl.grantee)
      from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) acl
     where c.oid = 'events'::pg_catalog.regclass
       and acl.privilege_type = 'SELECT' and acl.grantee <> 0
  loop
    execute pg_catalog.format(
      'grant select on table breakers, breaker_outcomes, breaker_events to %I', v_role);
  end loop;
end
$$;
