-- A worker's poll reads each provider's oldest pending jobs, up to that
-- provider's free slots (issue 36: one provider's backlog filled every
-- poll and starved the others). This index serves that read per provider,
-- and an enumeration of the providers with pending jobs (a skip scan), so
-- a poll reads about as many rows as it takes whatever the backlog; the
-- index of pending jobs by age alone served only the read it replaces.
drop index jobs_pending;
create index jobs_pending_by_provider on jobs (provider, created_at, id) where state = 'pending';
