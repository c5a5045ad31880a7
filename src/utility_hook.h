/*
 * utility_hook.h
 *	  DISCARD ALL releases zklock's session locks.
 */
#ifndef ZKLOCK_UTILITY_HOOK_H
#define ZKLOCK_UTILITY_HOOK_H

extern void zklock_install_utility_hook(void);

#endif							/* ZKLOCK_UTILITY_HOOK_H */
