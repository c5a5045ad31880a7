-- Everything this session held is gone, in ZooKeeper too.
SELECT zk_lock_release_all();
SELECT * FROM my_locks;
SELECT in_new_session($$SELECT string_agg(zk_lock_try_acquire(n)::text, ',') FROM unnest(ARRAY['surface', 're', 'both', 'a/b', 'x-commit', 'waits']) AS n$$) AS all_free;
DROP EXTENSION zklock CASCADE;
