-- Version 1.0 updated to the current version (through every update script)
-- has the same objects as a fresh install.
-- Runs after cleanup has dropped the extension.

-- Every member object with its definition, comment and privileges.
CREATE FUNCTION zklock_objects() RETURNS TABLE (object text, definition text)
LANGUAGE sql AS $$
  SELECT pg_describe_object(d.classid, d.objid, 0),
         concat_ws(' | ',
           CASE d.classid WHEN 'pg_proc'::regclass
             THEN pg_get_functiondef(d.objid) END,
           CASE d.classid WHEN 'pg_class'::regclass
             THEN pg_get_viewdef(d.objid) END,
           (SELECT proacl::text FROM pg_proc WHERE d.classid = 'pg_proc'::regclass AND oid = d.objid),
           (SELECT relacl::text FROM pg_class WHERE d.classid = 'pg_class'::regclass AND oid = d.objid),
           obj_description(d.objid))
    FROM pg_depend d JOIN pg_extension e ON d.refobjid = e.oid
   WHERE e.extname = 'zklock' AND d.deptype = 'e'
$$;

CREATE EXTENSION zklock VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'zklock';
ALTER EXTENSION zklock UPDATE TO '1.1';
SELECT extversion FROM pg_extension WHERE extname = 'zklock';
-- A library newer than the installed version's SQL answers in its shape.
ALTER EXTENSION zklock UPDATE TO '1.4';
SELECT sqlstate_of('SELECT * FROM zk_session_stats');
SELECT count(*) AS columns_1_4 FROM pg_attribute
 WHERE attrelid = 'zk_session_stats'::regclass AND attnum > 0;
ALTER EXTENSION zklock UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'zklock';
CREATE TABLE updated AS SELECT * FROM zklock_objects();

DROP EXTENSION zklock;
CREATE EXTENSION zklock;
SELECT extversion FROM pg_extension WHERE extname = 'zklock';
CREATE TABLE fresh AS SELECT * FROM zklock_objects();
SELECT * FROM zklock_members;

SELECT 'only after update' AS where_, object FROM (TABLE updated EXCEPT TABLE fresh) AS x
UNION ALL
SELECT 'only in fresh install', object FROM (TABLE fresh EXCEPT TABLE updated) AS y;
SELECT count(*) > 20 AS compared_objects FROM fresh;
-- What PUBLIC may do with the views, in both.
SELECT c.relname, a.privilege_type
  FROM pg_depend d JOIN pg_extension e ON d.refobjid = e.oid
       JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid,
       aclexplode(c.relacl) AS a
 WHERE e.extname = 'zklock' AND a.grantee = 0
 ORDER BY 1;

-- Statistics and locks work after the update.
SELECT sqlstate_of('SELECT * FROM zk_lock_stats');
SELECT sqlstate_of('SELECT * FROM zk_session_stats');
SELECT zk_lock_acquire('after-update'), zk_lock_release('after-update');
SELECT zk_barrier_enter('after-update', 1), zk_barrier_leave('after-update');
DROP TABLE updated, fresh;
DROP FUNCTION zklock_objects();

-- In a schema off the search path, the functions still find each other.
DROP EXTENSION zklock;
CREATE SCHEMA zk;
CREATE EXTENSION zklock SCHEMA zk;
SET search_path = pg_catalog;
SELECT zk.zk_lock_acquire('off-path');
SELECT lock_name, mode, holding FROM zk.zk_lock_holders('off-path');
SELECT count(*) FROM zk.zk_cluster_locks WHERE lock_name = 'off-path';
SELECT zk.zk_lock_release('off-path');
RESET search_path;
DROP EXTENSION zklock;
DROP SCHEMA zk;
