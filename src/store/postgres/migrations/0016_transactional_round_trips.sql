-- sideeffect: backward-compatible
-- 0016: a transactional effect in two round trips of the store's own (issue 33). PgStore sent
-- five: the BEGIN with its settings and the session's fingerprint, the grant, the session reset,
-- the key's write, the COMMIT with the fingerprint again; the fingerprint's twenty-odd function
-- calls were parsed and planned afresh in each of them. Now the BEGIN carries the grant
-- (tx_open) and the reset carries the key's write and the COMMIT (tx_finish), and what they
-- compute lives in the plpgsql functions below, whose plans each connection keeps. Same checks,
-- same answers, same locks in the same order. Only new functions: nothing a worker of an earlier
-- version calls changes.

-- What a transactional effect's work could leave to the pool's next user and the store puts back
-- (PgStore compares it at the transaction's start and end, and discards a connection whose
-- fingerprint moved): the role, the settings that change how statements run or how values are
-- written and read, and the session's objects a reset cannot put back (temporary relations, SQL
-- prepared statements). The caller's current_user and search_path are passed in: inside this
-- function they are its owner's and its pinned path. A session that never made a temporary
-- object has no temporary schema (0), and pg_class is only scanned for one that has.
create function tx_session_state(p_user text, p_search_path text) returns text
  language plpgsql
  set search_path from current
as $$
begin
  return pg_catalog.concat_ws(e'\x1f', session_user, p_user, p_search_path,
    pg_catalog.current_setting('statement_timeout'),
    pg_catalog.current_setting('lock_timeout'),
    pg_catalog.current_setting('idle_in_transaction_session_timeout'),
    pg_catalog.current_setting('default_transaction_isolation'),
    pg_catalog.current_setting('default_transaction_read_only'),
    pg_catalog.current_setting('default_transaction_deferrable'),
    pg_catalog.current_setting('synchronous_commit'),
    pg_catalog.current_setting('session_replication_role'),
    pg_catalog.current_setting('row_security'),
    pg_catalog.current_setting('work_mem'),
    pg_catalog.current_setting('extra_float_digits'),
    pg_catalog.current_setting('bytea_output'),
    pg_catalog.current_setting('TimeZone'),
    pg_catalog.current_setting('DateStyle'),
    pg_catalog.current_setting('IntervalStyle'),
    pg_catalog.current_setting('client_encoding'),
    pg_catalog.current_setting('standard_conforming_strings'),
    pg_catalog.current_setting('application_name'),
    pg_catalog.pg_my_temp_schema(),
    tx_temp_relations(),
    tx_sql_prepared());
end
$$;

-- The session's temporary relations: none without a temporary schema, looked up only with one.
create function tx_temp_relations() returns bigint
  language plpgsql
  set search_path from current
as $$
begin
  if pg_catalog.pg_my_temp_schema() = 0 then
    return 0;
  end if;
  return (select pg_catalog.count(*) from pg_catalog.pg_class
           where relnamespace = pg_catalog.pg_my_temp_schema());
end
$$;

-- The session's SQL-level prepared statements (PREPARE), not the protocol-level ones of a driver.
create function tx_sql_prepared() returns bigint
  language plpgsql
  set search_path from current
as $$
begin
  return (select pg_catalog.count(*) from pg_catalog.pg_prepared_statements where from_sql);
end
$$;

-- A transactional effect's bounds, local to its transaction: no statement and no pause between
-- them longer than the TTL (p_ttl), on Postgres 17 and later not the whole transaction either
-- (what is left of it, p_remaining), and the key the commit check (0007, 0011) reads.
create function tx_bounds(p_key text, p_ttl text, p_remaining text) returns text
  language plpgsql
  set search_path from current
as $$
declare
  v_set text;
begin
  -- Expressions, not statements: plpgsql evaluates them without starting an executor.
  v_set := pg_catalog.set_config('statement_timeout', p_ttl, true)
        || pg_catalog.set_config('idle_in_transaction_session_timeout', p_ttl, true)
        || pg_catalog.set_config('sideeffect.transactional_key', p_key, true);
  if pg_catalog.current_setting('server_version_num')::integer >= 170000 then
    v_set := pg_catalog.set_config('transaction_timeout', p_remaining, true);
  end if;
  return v_set;
end
$$;

-- The start of a transactional effect, right after its BEGIN, in one call: the session's
-- fingerprint as it came (before any setting of the store's); the backend and transaction the
-- store's deadline watches; behind a transaction-mode pooler, the counts tx_finish() compares
-- with; the transaction's bounds (tx_bounds); then the grant, waiting at most p_lock_wait for the
-- resource's row, after which the caller's own lock_timeout is back.
--
-- The grant (what PgStore's txAcquire, txRecheck and txRaiseSink statements did): a key never
-- seen on a resource nobody holds has the row locked and its fence raised by one UPDATE; if the
-- row moved while the UPDATE waited for it (the fence is not one past the one its snapshot saw),
-- a transaction that held it may have committed the key, so tx_recheck() reads it afresh.
-- Anything else is judged by tx_acquire(). Granted, the resource's sink mark is raised to the
-- fence before any row the work touches is locked (as writeFenced raises it before its write), so
-- the two never wait on each other in a cycle: one fence per resource across both modes.
create function tx_open(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_ttl text,
  p_lock_wait text,
  p_user text,
  p_search_path text,
  p_pooled boolean,
  out o_session text,
  out o_pid integer,
  out o_xid bigint,
  out o_temp bigint,
  out o_prepared bigint,
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
  v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
  v_seen bigint;
  v_set text;
begin
  o_session := tx_session_state(p_user, p_search_path);
  o_pid := pg_catalog.pg_backend_pid();
  o_xid := pg_catalog.txid_current();
  if p_pooled then
    o_temp := tx_temp_relations();
    o_prepared := tx_sql_prepared();
  end if;
  v_set := tx_bounds(p_key, p_ttl, p_ttl) || pg_catalog.set_config('lock_timeout', p_lock_wait, true);

  update resources set fence = fence + 1
   where resource = p_resource and holder is null
     and not exists (select from keys where key = p_key)
  returning fence, (select r.fence from resources r where r.resource = p_resource)
    into o_fence, v_seen;
  if not found then
    select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
      into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
      from tx_acquire(p_key, p_resource, p_digest) a;
  elsif o_fence <> v_seen + 1 then
    select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
      into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
      from tx_recheck(p_key, p_resource, p_digest, o_fence) a;
  else
    o_outcome := 'applied';
  end if;
  if o_outcome = 'applied' then
    insert into sink_fences as sink (resource, fence) values (p_resource, o_fence)
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence);
  end if;
  v_set := pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
end
$$;

-- The end of a transactional effect, after PgStore's RESET ALL, RESET ROLE and the rest put the
-- session back, in the same round trip, before its COMMIT: the session's fingerprint as the
-- pool's next user will find it; the work's session advisory locks released (behind a
-- transaction-mode pooler, what would outlive the commit there refused: SE163, with what is left
-- in its detail); the bounds set again for what is left of the transaction; and the key written
-- done by tx_record() (0013): only by the transaction that raised the resource's fence to p_fence,
-- so no key is recorded done without its grant (SE132). Its two refusals are raised, so the
-- COMMIT after this statement never runs: SE162 when the work ended the grant's transaction,
-- SE161 when a key of that name was committed meanwhile (on another resource).
create function tx_finish(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_fence bigint,
  p_retry_safety text,
  p_result bytea,
  p_xid bigint,
  p_ttl text,
  p_remaining text,
  p_user text,
  p_search_path text,
  p_pooled boolean,
  p_temp bigint,
  p_prepared bigint,
  out o_session text,
  out o_at_ms bigint
)
  language plpgsql
  set search_path from current
as $$
declare
  v_locks bigint;
  v_left text[] := '{}';
  v_set text;
  v_same boolean;
begin
  o_session := tx_session_state(p_user, p_search_path);
  if p_pooled then
    select pg_catalog.count(*) into v_locks from pg_catalog.pg_locks
     where locktype = 'advisory' and pid = pg_catalog.pg_backend_pid();
  end if;
  perform pg_catalog.pg_advisory_unlock_all();
  if p_pooled then
    if v_locks > (select pg_catalog.count(*) from pg_catalog.pg_locks
                   where locktype = 'advisory' and pid = pg_catalog.pg_backend_pid()) then
      v_left := v_left || 'a session advisory lock'::text;
    end if;
    if tx_temp_relations() > p_temp then
      v_left := v_left || 'a temporary relation'::text;
    end if;
    if tx_sql_prepared() > p_prepared then
      v_left := v_left || 'a prepared statement (PREPARE)'::text;
    end if;
    if pg_catalog.cardinality(v_left) > 0 then
      raise exception using
        errcode = 'SE163',
        message = 'sideeffect: the transactional work left session state behind a transaction-mode pooler',
        detail = pg_catalog.array_to_string(v_left, ', ');
    end if;
  end if;
  v_set := tx_bounds(p_key, p_ttl, p_remaining);

  select r.o_same, r.o_at_ms into v_same, o_at_ms
    from tx_record(p_key, p_resource, p_digest, p_fence, p_retry_safety, p_result, p_xid) r;
  if not v_same then
    raise exception using
      errcode = 'SE162',
      message = pg_catalog.format('sideeffect: the work ended the transaction of transactional key %s', p_key);
  end if;
  if o_at_ms is null then
    raise exception using
      errcode = 'SE161',
      message = pg_catalog.format('sideeffect: transactional key %s was committed meanwhile', p_key);
  end if;
end
$$;
