/*
 * lock_name.h
 *	  Lock names and the znode paths they map to.
 */
#ifndef ZKLOCK_LOCK_NAME_H
#define ZKLOCK_LOCK_NAME_H

#include "nodes/pg_list.h"

/* Longest lock name accepted, in bytes. */
#define ZKLOCK_NAME_MAX 256

extern void zklock_check_name(const char *name);
extern char *zklock_encode_name(const char *name);
extern char *zklock_parent_path(const char *name);
extern char *zklock_decode_name(const char *encoded);
extern bool zklock_valid_znode_path(const char *path);
extern bool zklock_in_reserved_tree(const char *path);
extern char *zklock_subtree_problem(const char *what, const char *path);
extern List *zklock_split_path_list(const char *list);

#endif							/* ZKLOCK_LOCK_NAME_H */
