-- The durable record of intents and of the tries to fulfil them.
-- Timestamps and ids are always bound by the application from its injected
-- clock and id source; no default here calls now() or a random function.

create table jobs (
    id                  uuid primary key,
    owner_id            text not null,
    idempotency_key     text not null,
    request_fingerprint text not null,
    request             jsonb not null,
    provider            text not null,
    fallbacks           text[] not null,
    state               text not null check (state in ('pending', 'succeeded', 'failed')),
    version             bigint not null default 0 check (version >= 0),
    completed_by        uuid null,
    result              jsonb null,
    created_at          timestamptz not null,
    updated_at          timestamptz not null,
    -- One job per intent: the database, not the application, is the enforcer.
    constraint jobs_owner_id_idempotency_key_key unique (owner_id, idempotency_key),
    constraint jobs_result_with_winner check ((completed_by is null) = (result is null)),
    constraint jobs_succeeded_has_winner check ((state = 'succeeded') = (completed_by is not null))
);

create table attempts (
    id           uuid primary key,
    job_id       uuid not null references jobs (id),
    seq          int not null check (seq >= 1),
    provider     text not null,
    state        text not null check (state in
                   ('starting', 'running', 'succeeded', 'failed', 'unknown', 'cancelled', 'lost')),
    read_version bigint not null,
    started_at   timestamptz not null,
    ended_at     timestamptz,
    output       jsonb,
    error        jsonb,
    constraint attempts_job_id_seq_key unique (job_id, seq)
);

-- The guard: no new attempt while another of the same job is starting or
-- unknown. Only a terminal outcome or an out-of-band resolution frees it.
create unique index attempts_one_open on attempts (job_id) where state in ('starting', 'unknown');

-- Lookups by state for the worker and the reconciler.
create index attempts_open_by_state on attempts (state, started_at)
    where state in ('starting', 'running', 'unknown');
create index jobs_pending on jobs (created_at) where state = 'pending';

alter table jobs add constraint jobs_completed_by_fkey
    foreign key (completed_by) references attempts (id);

-- The decision trace: races, refusals, resolutions.
create table job_events (
    seq        bigserial primary key,
    job_id     uuid not null references jobs (id),
    attempt_id uuid null references attempts (id),
    at         timestamptz not null,
    kind       text not null,
    detail     jsonb not null
);
create index job_events_by_job on job_events (job_id, seq);

-- Contract certificates: failover and hedging consult these.
create table provider_certificates (
    provider       text not null,
    model          text not null,
    prompt_version text not null,
    schema_version text not null,
    passed         boolean not null,
    evidence       jsonb not null,
    at             timestamptz not null,
    primary key (provider, model, prompt_version, schema_version)
);
