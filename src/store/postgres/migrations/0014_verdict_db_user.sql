-- sideeffect: backward-compatible
-- 0014: who recorded an event, as the database knows it (issue 30). `actor` (the verdict's `by`)
-- and `identity` (the Temporal identity of the signal or Update) are declared by whoever sends
-- them: resolve_uncertain() takes both as arguments, so any role allowed to call it (the operator
-- role, the CLI) may write any name there. `db_user` is the role Postgres authenticated for the
-- session that wrote the row (`session_user`: a SET ROLE does not change it, the function's
-- owner rights do not either). It is filled by a trigger on every insert, whatever inserted the
-- row and whatever it passed, so neither resolve_uncertain() nor a direct insert can choose it,
-- and workers of the previous release get it too (this migration changes no function they call).
-- Null for events recorded before it.
alter table events add column if not exists db_user text;

create or replace function events_db_user() returns trigger
  language plpgsql
  set search_path from current
as $$
begin
  new.db_user := session_user;
  return new;
end
$$;

revoke execute on function events_db_user() from public;

create trigger events_db_user before insert on events
  for each row execute function events_db_user();
