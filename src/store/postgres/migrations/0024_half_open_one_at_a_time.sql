-- sideeffect: backward-compatible
-- 0024: while half-open, at most one attempt of a group is at the provider. 0021 gave the probe's
-- slot to the next attempt once one cool-down had passed, whether or not the probe was still
-- running: a probe slower than the cool-down (a provider that hangs, a loaded worker) had a second
-- attempt join it at the provider it was testing, and each of them could end uncertain and wait
-- for a person. The slot now passes on only once the cool-down has passed and the probe holds no
-- live lease (it ended, released, or its worker died and the lease ran out); a refused attempt is
-- told to come back when both are over. Same name, arguments and results: workers of 0.3.0 and
-- 0.4.0 call it unchanged and get the new answer. The MemoryStore's BreakerMachine agrees.

create or replace function breaker_admit(
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
  -- When the probe's live lease runs out; null once it holds none.
  v_probe_held timestamptz;
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
  if b.state = 'half-open' and b.probe_key is distinct from p_key then
    select r.expires_at into v_probe_held
      from keys k join resources r on r.resource = k.resource
     where k.key = b.probe_key and r.holder = b.probe_key and r.expires_at > v_now;
  end if;
  if b.state = 'open' and not b.manual and b.until <= v_now then
    o_from := breaker_move(p_group, 'half-open', 'cool-down over: one attempt goes through',
                           'breaker', null, v_now);
    update breakers set probe_key = p_key, until = v_now + cool_down_ms * interval '1 millisecond'
     where grp = p_group;
    o_probe := true;
  elsif b.state = 'half-open'
        and (b.probe_key = p_key or (b.until <= v_now and v_probe_held is null)) then
    update breakers set probe_key = p_key, until = v_now + cool_down_ms * interval '1 millisecond'
     where grp = p_group;
    o_probe := true;
  else
    o_admitted := false;
    o_retry_at_ms := epoch_ms(greatest(coalesce(b.until, v_now + p_cool_ms * interval '1 millisecond'),
                                       v_probe_held));
    o_retry_after_ms := o_retry_at_ms - epoch_ms(v_now);
  end if;
  select a.o_group, a.o_state, a.o_since_ms, a.o_reason, a.o_by, a.o_identity, a.o_manual,
         a.o_uncertain, a.o_until_ms, a.o_cool_ms, a.o_probe_key
    into o_group, o_state, o_since_ms, o_reason, o_by, o_identity, o_manual, o_uncertain,
         o_until_ms, o_cool_ms, o_probe_key
    from breaker_answer(p_group) a;
end
$$;
