/*
 * revocation.h
 *	  A requested release as an interrupt, under zklock.revocable.
 */
#ifndef ZKLOCK_REVOCATION_H
#define ZKLOCK_REVOCATION_H

#include "lock_table.h"

extern void revocation_granted(LockEntry *entry);
extern void revocation_xact_end(bool commit);
extern bool revocation_quiet(bool on);
extern void zklock_install_revocation_hooks(void);

#endif							/* ZKLOCK_REVOCATION_H */
