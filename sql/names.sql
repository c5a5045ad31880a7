-- Lock names are encoded into one znode each; distinct names never collide.
-- A name with a leading slash is an absolute path, used as it is.
SELECT zk_lock_acquire(n)
  FROM unnest(ARRAY['a/b', 'a%2Fb', '.', '..', '...', 'zookeeper', 'ñandú',
                    'with space', 'UPPER', 'a.b', '%', 'trailing/',
                    '/zklock_regress/paths/app lock', '/zklock_regress/paths/ñ',
                    'tab	tab', 'e' || chr(233)]) AS n;
SELECT name, znode FROM my_locks;
SELECT count(DISTINCT znode) AS distinct_znodes, count(*) AS locks FROM zk_locks;

-- Held here: each name is taken, and a look-alike is free.
SELECT in_new_session($$SELECT zk_lock_try_acquire('a/b')::text$$) AS a_slash_b,
       in_new_session($$SELECT zk_lock_try_acquire('a%2Fb')::text$$) AS a_pct_2fb,
       in_new_session($$SELECT zk_lock_try_acquire('a%252Fb')::text$$) AS a_pct_252fb,
       in_new_session($$SELECT zk_lock_try_acquire('..')::text$$) AS dotdot,
       in_new_session($$SELECT zk_lock_try_acquire('....')::text$$) AS four_dots;
SELECT zk_lock_release_all();

-- The longest name allowed, and one byte more.
SELECT zk_lock_acquire(repeat('x', 256));
SELECT length(name) FROM zk_locks;
SELECT zk_lock_release(repeat('x', 256));
SELECT zk_lock_acquire(repeat('x', 257));
-- Multibyte: the limit is in bytes.
SELECT zk_lock_acquire(repeat('ñ', 128));
SELECT zk_lock_release(repeat('ñ', 128));
SELECT zk_lock_acquire(repeat('ñ', 129));

-- Absolute paths ZooKeeper would refuse.
SELECT n, sqlstate_of(format('SELECT zk_lock_acquire(%L)', n))
  FROM unnest(ARRAY['/', '/a/', '//a', '/a//b', '/a/./b', '/a/..', '/zookeeper',
                    '/zookeeper/quota/x', '/a' || chr(1)]) AS n;
-- ZooKeeper refuses characters, not bytes: these are refused before any is
-- sent (they were 58000 "bad arguments" from the server).
SELECT 'U+' || upper(to_hex(c)) AS refused,
       left(sqlstate_of(format('SELECT zk_lock_acquire(%L)', '/a' || chr(c))), 5) AS sqlstate
  FROM unnest(ARRAY[127, 128, 159, 57344, 63743, 65520, 65533, 128512]) AS c;
-- Their neighbours are taken.
SELECT zk_lock_acquire(n) AND zk_lock_release(n) AS taken
  FROM (SELECT '/zklock_regress/abs-' || chr(126) || chr(160) || chr(233) || chr(55295)
               || chr(63744) || chr(65519) AS n) AS t;
SELECT * FROM my_locks;

-- Empty and NULL names.
SELECT zk_lock_acquire('');
SELECT zk_lock_acquire(NULL);
SELECT zk_lock_try_acquire(NULL);
SELECT zk_lock_release('');
SELECT zk_lock_token(NULL);
SELECT * FROM my_locks;
