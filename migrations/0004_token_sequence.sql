-- Tokens are drawn from one sequence (pgfence.next_token, sql/fencing.sql): a sequence is not rolled
-- back with the transaction that advanced it, so a token handed out in a transaction that rolls back
-- is never handed out again (a per-key counter alone went back with the rollback). The sequence
-- starts at the largest token any key holds, so every token issued after this migration exceeds
-- every token issued before it, for every key.
CREATE SEQUENCE pgfence.token_sequence AS bigint MINVALUE 1 NO CYCLE;
SELECT setval('pgfence.token_sequence', greatest(1, (SELECT max(token) FROM pgfence.fencing_tokens)));
