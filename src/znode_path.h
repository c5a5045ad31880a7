/*
 * znode_path.h
 *	  ZooKeeper paths: which ones ZooKeeper accepts, its reserved tree, lists.
 */
#ifndef ZKLOCK_ZNODE_PATH_H
#define ZKLOCK_ZNODE_PATH_H

#include "nodes/pg_list.h"

extern bool zklock_valid_znode_path(const char *path);
extern bool zklock_in_reserved_tree(const char *path);
extern char *zklock_subtree_problem(const char *what, const char *path);
extern List *zklock_split_path_list(const char *list);

#endif							/* ZKLOCK_ZNODE_PATH_H */
