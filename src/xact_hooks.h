/*
 * xact_hooks.h
 *	  Transaction and subtransaction callbacks.
 */
#ifndef ZKLOCK_XACT_HOOKS_H
#define ZKLOCK_XACT_HOOKS_H

extern void zklock_register_xact_hooks(void);

#endif							/* ZKLOCK_XACT_HOOKS_H */
