-- pgfence's first schema. Everything pgfence stores lives in the pgfence schema. The migration
-- history tables (pgfence.schema_migrations, pgfence.schema_definitions) are created by the
-- migration runner itself, before this file runs, so the schema may already exist.
CREATE SCHEMA IF NOT EXISTS pgfence;

-- Fencing-token counter: the last token issued for each lock key (only ever increases).
CREATE TABLE pgfence.fencing_tokens (
  key        bigint      PRIMARY KEY,
  token      bigint      NOT NULL CHECK (token > 0),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Table-backed leases: who holds each key until when (database clock); released rows are kept.
CREATE TABLE pgfence.leases (
  key         bigint      PRIMARY KEY,
  name        text,
  owner       text        NOT NULL,
  token       bigint      NOT NULL,
  acquired_at timestamptz NOT NULL,
  renewed_at  timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL,
  released_at timestamptz,
  data        jsonb
);
CREATE INDEX leases_expires_at_idx ON pgfence.leases (expires_at);

-- Name registry: maps advisory-lock keys back to lock names for inspect() and `pgfence status`.
CREATE TABLE pgfence.lock_names (
  key           bigint      PRIMARY KEY,
  name          text        NOT NULL,
  namespace     text,
  registered_at timestamptz NOT NULL DEFAULT now()
);
