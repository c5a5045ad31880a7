/*
 * lock_name.h
 *	  Lock names and the znode paths they map to.
 */
#ifndef ZKLOCK_LOCK_NAME_H
#define ZKLOCK_LOCK_NAME_H

/* Longest lock name accepted, in bytes. */
#define ZKLOCK_NAME_MAX 256

extern void zklock_check_name(const char *name);
extern void zklock_check_name_of(const char *what, const char *name);
extern char *zklock_encode_name(const char *name);
extern char *zklock_parent_path(const char *name);
extern char *zklock_place_path(const char *name, const char *place);
extern char *zklock_decode_name(const char *encoded);

#endif							/* ZKLOCK_LOCK_NAME_H */
