-- sideeffect: backward-compatible
-- 0018: no function the runtime role may run raises a fence or a sink mark beyond what the store
-- issued for a real attempt (issue 39). tx_burn_fence() moved a free resource one step per call,
-- so 200 calls raised its fence by 200; raise_sink_mark(..., p_issued_here => false) raised a
-- mark to any value, after which every legitimate write of that resource was stale and its
-- effect uncertain. Same names, arguments and results: workers of 0.2.0 call both unchanged.

-- After work that rolled a transactional grant back (the store's txBurnFence): the resource moves
-- to the fence that grant had, which what the work wrote after its ROLLBACK may carry. Only when
-- that grant really happened and was rolled back: the resource's row still carries, as its xmax,
-- the transaction that updated it (a grant raises the fence in its own transaction) and that
-- transaction aborted. The burn's own update leaves a row no transaction rolled back, so a fence
-- is burnt once per rolled-back grant. A resource whose row the rolled-back grant created has no
-- row left: it gets fence 1 and nothing more. Someone holding it, or having moved it already:
-- nothing.
create or replace function tx_burn_fence(p_resource text, p_fence bigint) returns void
  language plpgsql
  set search_path from current
as $$
declare
  v_fence bigint;
  v_holder text;
  v_xmax bigint;
  v_next bigint;
  v_xid bigint;
  v_status text;
begin
  select fence, holder, xmax::text::bigint into v_fence, v_holder, v_xmax
    from resources where resource = p_resource;
  if not found then
    if p_fence = 1 then
      insert into resources (resource, fence) values (p_resource, 1) on conflict do nothing;
    end if;
    return;
  end if;
  if v_holder is not null or v_fence <> p_fence - 1 then
    return;
  end if;
  -- 0: nobody updated or locked the row since its last write. Read without a lock (a lock would
  -- make this transaction its xmax); the update below checks the fence again under its lock.
  if v_xmax = 0 then
    return;
  end if;
  -- The 32-bit xmax as a 64-bit transaction id: the epoch of the next one, one epoch back if it
  -- would lie ahead of it.
  v_next := pg_catalog.txid_snapshot_xmax(pg_catalog.txid_current_snapshot());
  v_xid := v_next - v_next % 4294967296 + v_xmax;
  if v_xid >= v_next then
    v_xid := v_xid - 4294967296;
  end if;
  begin
    v_status := pg_catalog.txid_status(v_xid);
  exception when others then
    -- Not a transaction id this cluster can judge (a multixact, or older than its clog).
    return;
  end;
  if v_status is distinct from 'aborted' then
    return;
  end if;
  update resources set fence = p_fence
   where resource = p_resource and holder is null and fence = p_fence - 1;
end
$$;

-- A sink mark raised (PgFencedSink, and a transactional grant's takeover), only to a fence the
-- store of THIS schema issued for the resource (SE131): a sink pointed at another schema than its
-- store's is refused at its first write instead of letting a paused holder's stale write land.
-- p_at_least: raise to at least p_fence (a read, or the grant; a probe's read may name the next
-- fence, one past the issued one); otherwise refuse a lower one. p_issued_here false (the sink's
-- data lives in another database than its store, PgFencedSink's separateDatabase) skips the check
-- only where it cannot be made: in a schema whose store never issued a fence. Where a store issues
-- fences, a mark above them is refused whatever the caller says. Returns the mark, or null when a
-- newer fence is recorded (nothing raised).
create or replace function raise_sink_mark(
  p_resource text, p_fence bigint, p_at_least boolean, p_issued_here boolean default true
)
  returns bigint
  language plpgsql
  set search_path from current
as $$
declare
  v_issued bigint;
  v_mark bigint;
begin
  select fence into v_issued from resources where resource = p_resource;
  -- A probe reads with the fence after the key's last (src/activities), one past the issued one.
  if (p_issued_here or v_issued is not null or exists (select from resources))
     and (v_issued is null or p_fence > v_issued + p_at_least::integer) then
    raise exception using
      errcode = 'SE131',
      message = format('sideeffect: fence %s of resource %s was never issued by the store of schema %s',
                       p_fence, p_resource, current_schema()),
      hint = 'Give the PgFencedSink the schema of the store whose leases it checks, or, for data in another database than the store''s, separateDatabase: true.';
  end if;
  if p_at_least then
    insert into sink_fences as sink (resource, fence) values (p_resource, p_fence)
    on conflict (resource) do update set fence = greatest(sink.fence, excluded.fence)
    returning fence into v_mark;
  else
    insert into sink_fences as sink (resource, fence) values (p_resource, p_fence)
    on conflict (resource) do update set fence = excluded.fence
    where sink.fence <= excluded.fence
    returning fence into v_mark;
  end if;
  return v_mark;
end
$$;
