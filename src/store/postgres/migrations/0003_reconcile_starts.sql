-- 0003: which uncertain keys already have a ReconcileWorkflow, so one sweeper per store starts
-- one per key and episode instead of one start call per key per tick per worker.

-- The episode (the key's fence when it became uncertain) a ReconcileWorkflow was started for,
-- and when. A key that is re-applied and becomes uncertain again has a newer fence, so its new
-- episode is claimed again; a purged key takes its row with it.
create table reconcile_starts (
  key text primary key references keys (key) on delete cascade,
  fence bigint not null,
  started_at timestamptz not null
);
