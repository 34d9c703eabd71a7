-- The create path writes no event row (issue 14).
--
-- A job's `created` event repeated what its row holds (created_at and the
-- request fingerprint); it is now synthesized from the row when the
-- decision trace is read. A same-body replay decided and changed nothing;
-- it is counted in the server's metrics (jobs_replayed) instead. The rows
-- written before this migration would now be shown twice or name a kind
-- that is no longer written, so they go.
delete from job_events where kind in ('created', 'replayed');

-- The listing index serves only queries that name its predicate (the
-- owner's job list does). Without the predicate, a plan made while the
-- table is empty and has no statistics (a fresh deployment, or any
-- connection that prepared its statements then and keeps them) costs the
-- lookup by (owner, key) the same through this index as through the
-- unique one, picks this one, and then reads every job of the owner for
-- each create: 0.3 to 0.6 ms of server time per create under `idem
-- bench`, growing with the owner's jobs. `created_at` is never null, so
-- the index still holds every row.
drop index jobs_by_owner;
create index jobs_by_owner on jobs (owner_id, created_at, id) where created_at is not null;
