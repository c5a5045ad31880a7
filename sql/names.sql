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

-- A name is one lock in databases of any encoding: it goes to ZooKeeper in
-- UTF-8 and is read back into each database's encoding.  A LATIN1 database
-- (dblink converts between it and this one) takes 'café' and an absolute
-- path with 'é'; here they are held, under the names they have here.
CREATE DATABASE zklock_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'
  TEMPLATE template0;
SELECT dblink_connect('latin1', 'dbname=zklock_latin1');
SELECT dblink_exec('latin1', 'CREATE EXTENSION zklock');
SELECT * FROM dblink('latin1', $$SELECT current_setting('server_encoding'),
                                       zk_lock_acquire('café'),
                                       zk_lock_acquire('/zklock_regress/paths/é')$$)
  AS t(encoding text, name_taken bool, path_taken bool);
SELECT zk_lock_try_acquire('café') AS cafe_free,
       zk_lock_try_acquire('/zklock_regress/paths/é') AS path_free;
SELECT lock_name, mode, database FROM zk_cluster_locks WHERE lock_name = 'café';
SELECT lock_name, mode, database FROM zk_lock_holders('/zklock_regress/paths/é');
-- What LATIN1 lacks is listed there under its node's name.
SELECT zk_lock_acquire('€uro');
SELECT * FROM dblink('latin1', $$SELECT lock_name, database FROM zk_cluster_locks
                                 ORDER BY lock_name$$) AS t(lock_name text, database text);
SELECT zk_lock_release('€uro');
SELECT dblink_disconnect('latin1');
DROP DATABASE zklock_latin1 WITH (FORCE);
