-- An INSERT + COMMIT without a fence, against which the fences are timed.
BEGIN;
INSERT INTO bench_fenced (v) VALUES (1);
COMMIT;
