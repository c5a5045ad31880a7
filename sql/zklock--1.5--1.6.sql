/* zklock--1.5--1.6.sql */

\echo Use "ALTER EXTENSION zklock UPDATE TO '1.6'" to load this file. \quit

-- zk_lock_fence(name) fences through zk_lock_fence(resource, token), and
-- since 1.6 (the library's, for every installed version) only for a role
-- that may execute that function too: a REVOKE on it locks both forms down.
COMMENT ON FUNCTION zk_lock_fence(text) IS
'fence the resource named like a lock this session holds exclusively, with that lock''s token; needs EXECUTE on zk_lock_fence(text, bigint) too';
