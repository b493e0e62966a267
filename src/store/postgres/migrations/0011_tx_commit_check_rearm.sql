-- sideeffect: backward-compatible
-- 0011: `set constraints all immediate` works inside a transactional effect (issue 31). The commit
-- check of 0007 is a deferred constraint trigger, so checking the deferred constraints early fired
-- it before the store had written the key, and it refused the transaction as ended early. Only
-- the function and the trigger's WHEN change; nothing a 0.1.0 worker calls.

-- As in 0007, plus: fired early by the work's SET CONSTRAINTS (PgStore's client marks that
-- statement with `sideeffect.constraints_early`), the check is not dropped but deferred again, to
-- the commit: this trigger's constraint is set back to DEFERRED and its event queued anew by a
-- no-op update of the resource row (already locked by the grant), which the WHEN below lets
-- through while `sideeffect.rearm` names the resource.
create or replace function tx_commit_check() returns trigger
  language plpgsql
  set search_path from current
as $$
declare
  v_key text := nullif(pg_catalog.current_setting('sideeffect.transactional_key', true), '');
begin
  if v_key is not null then
    perform from keys where key = v_key and resource = new.resource and fence = new.fence;
    if not found then
      if pg_catalog.current_setting('sideeffect.constraints_early', true) = '1' then
        perform pg_catalog.set_config('sideeffect.rearm', new.resource, true);
        set constraints tx_commits_its_key deferred;
        update resources set fence = fence where resource = new.resource;
        perform pg_catalog.set_config('sideeffect.rearm', '', true);
        return null;
      end if;
      raise exception using
        errcode = 'SE021',
        message = pg_catalog.format('sideeffect: the transaction of transactional key %s ended before the key was recorded', v_key),
        hint = 'Run the effect''s statements on the transaction it is given; never COMMIT or ROLLBACK it.';
    end if;
  end if;
  return null;
end
$$;

drop trigger tx_commits_its_key on resources;

create constraint trigger tx_commits_its_key
  after update of fence on resources
  deferrable initially deferred
  for each row
  when (new.holder is null
        and (new.fence > old.fence
             or pg_catalog.current_setting('sideeffect.rearm', true) = new.resource))
  execute function tx_commit_check();
