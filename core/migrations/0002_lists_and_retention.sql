-- Indexes for the list endpoints and for key retention.

-- GET /v1/jobs: an owner's jobs, newest first, by cursor.
create index jobs_by_owner on jobs (owner_id, created_at, id);

-- Retention: terminal jobs, oldest update first.
create index jobs_terminal_by_update on jobs (updated_at, id)
    where state in ('succeeded', 'failed');

-- Deleting a pruned job's attempts checks the rows that reference them:
-- without these, each deleted attempt would scan job_events and jobs.
create index job_events_by_attempt on job_events (attempt_id) where attempt_id is not null;
create index jobs_by_winner on jobs (completed_by) where completed_by is not null;
