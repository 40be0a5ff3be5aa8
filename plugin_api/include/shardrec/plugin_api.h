/*
 * shardrec plugin ABI v1 — everything a plugin or host needs in one include:
 * the base (versions, status, extensions, key/value lists, host services,
 * components, the entry symbol) and the vtables of the four kinds.
 * Reference: docs/abi.md.
 */
#ifndef SHARDREC_PLUGIN_API_H_
#define SHARDREC_PLUGIN_API_H_

#include "shardrec/abi/base.h"
#include "shardrec/abi/codec.h"
#include "shardrec/abi/comm.h"
#include "shardrec/abi/eviction.h"
#include "shardrec/abi/kernel.h"
#include "shardrec/abi/sharder.h"

#endif /* SHARDREC_PLUGIN_API_H_ */
