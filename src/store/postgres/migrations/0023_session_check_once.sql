-- sideeffect: backward-compatible
-- 0023: a transactional effect's session check taken once per effect, at a cost that does not
-- grow with the connection's prepared statements (issue 47). tx_open() took the session's
-- fingerprint (tx_session_state) before the work and the finish took it again after: twice per
-- effect, and each time tx_sql_prepared() materialised all of pg_prepared_statements (an
-- application's thousand named statements on the connection made the fingerprint ten times
-- dearer). PgStore now keeps the fingerprint the last finish took on a connection as the next
-- effect's "before", and learns of the work's PREPARE, DEALLOCATE and DISCARD from the client it
-- hands the work (it counts the SQL prepared statements only then). Only new functions: 0.2.0
-- and 0.3.0 workers keep calling tx_open(), tx_finish(), tx_settle() and tx_session_state().

-- tx_session_state() (0016) without the SQL prepared statements: the same settings, role,
-- search_path and temporary relations, at a cost that does not depend on the connection's
-- prepared statements.
create function tx_session_mark(p_user text, p_search_path text) returns text
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
    tx_temp_relations());
end
$$;

-- tx_open() (as 0022 left it: fences from next_fence()) with the session read only when asked: p_session (a connection's first effect,
-- or behind a transaction-mode pooler, where each transaction may land on another server
-- connection) gives the fingerprint (tx_session_mark) and the counts of temporary relations and
-- SQL prepared statements; otherwise the three are null and the caller compares with what the
-- connection's last finish left. The bounds, the grant, the sink mark and the tx_grants row as
-- tx_open() writes them.
create function tx_begin(
  p_key text,
  p_resource text,
  p_digest bytea,
  p_ttl text,
  p_lock_wait text,
  p_user text,
  p_search_path text,
  p_session boolean,
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
  if p_session then
    o_session := tx_session_mark(p_user, p_search_path);
    o_temp := tx_temp_relations();
    o_prepared := tx_sql_prepared();
  end if;
  o_pid := pg_catalog.pg_backend_pid();
  o_xid := pg_catalog.txid_current();
  v_set := tx_bounds(p_key, p_ttl, p_ttl) || pg_catalog.set_config('lock_timeout', p_lock_wait, true);

  update resources set fence = next_fence(fence)
   where resource = p_resource and holder is null
     and not exists (select from keys where key = p_key)
  returning fence, (select r.fence from resources r where r.resource = p_resource)
    into o_fence, v_seen;
  if not found then
    select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
      into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
      from tx_acquire(p_key, p_resource, p_digest) a;
  elsif o_fence <> next_fence(v_seen) then
    select a.o_outcome, a.o_fence, a.o_retry_after_ms, a.o_result, a.o_reason
      into o_outcome, o_fence, o_retry_after_ms, o_result, o_reason
      from tx_recheck(p_key, p_resource, p_digest, o_fence) a;
  else
    o_outcome := 'applied';
  end if;
  if o_outcome = 'applied' then
    insert into sink_fences as sink (resource, fence) values (p_resource, o_fence)
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence);
    insert into tx_grants (xid, key, synchronous_commit, session_replication_role)
    values (o_xid, p_key, pg_catalog.current_setting('synchronous_commit'),
            pg_catalog.current_setting('session_replication_role'));
  end if;
  v_set := pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
end
$$;
