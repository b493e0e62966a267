-- sideeffect: backward-compatible
-- 0007: transactional effects keep the store's promises under races, misuse and stalls (issue 21).
-- Only new functions, triggers and function settings: nothing a 0.1.0 worker calls changes.

-- The transactional grant's one-statement fast path (PgStore's txAcquire) decides "no such key"
-- from its statement's snapshot, taken before it waited for the resource row. When that row
-- moved meanwhile (its fence is not the one the snapshot saw) a transaction that held it may have
-- committed the key, so PgStore asks this function, whose own statement reads the key afresh
-- (READ COMMITTED: a new snapshot, taken after the row lock is ours). Same answers as
-- tx_acquire(); 'applied' keeps the fence the fast path already raised (p_fence).
create function tx_recheck(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_fence bigint,
  out o_outcome text,
  out o_fence bigint,
  out o_retry_after_ms bigint,
  out o_result bytea,
  out o_reason text
)
  language plpgsql
  set search_path from current
as $$
declare
  k keys;
begin
  select * into k from keys where key = p_key;
  if not found then
    o_outcome := 'applied';
    o_fence := p_fence;
  elsif k.resource <> p_resource then
    o_outcome := 'conflict:resource';
  elsif k.digest <> p_digest then
    o_outcome := 'conflict:payload';
  elsif k.state = 'done' then
    o_outcome := 'replayed';
    o_result := k.result;
  elsif k.state = 'uncertain' then
    o_outcome := 'uncertain';
    o_reason := coalesce(k.reason, '');
  else
    raise exception 'sideeffect: transactional key % is %, which only a commit could have made',
      p_key, k.state;
  end if;
end
$$;

-- A transactional effect's work must not end the store's transaction: a COMMIT inside it would
-- commit the work and the raised fence without the key (the next try runs the work again). Every
-- transactional grant raises its resource's fence with no holder, which no other path does; this
-- trigger, deferred to the commit, then checks that the key the grant named (PgStore sets
-- `sideeffect.transactional_key` in the grant statement) is recorded at that fence, and fails the
-- commit otherwise: the early COMMIT rolls everything back instead. A grant that named no key (a
-- statement of someone else's) is not judged.
create function tx_commit_check() returns trigger
  language plpgsql
  set search_path from current
as $$
declare
  v_key text := nullif(current_setting('sideeffect.transactional_key', true), '');
begin
  if v_key is not null then
    perform from keys where key = v_key and resource = new.resource and fence = new.fence;
    if not found then
      raise exception using
        errcode = 'SE021',
        message = format('sideeffect: the transaction of transactional key %s ended before the key was recorded', v_key),
        hint = 'Run the effect''s statements on the transaction it is given; never COMMIT or ROLLBACK it.';
    end if;
  end if;
  return null;
end
$$;

create constraint trigger tx_commits_its_key
  after update of fence on resources
  deferrable initially deferred
  for each row
  when (new.holder is null and new.fence > old.fence)
  execute function tx_commit_check();
