/* visible.c: the GPUs whose device nodes this process sees. Bottom layer (mokka.h only), below state.c. */
#ifndef MOKKA_VISIBLE_H
#define MOKKA_VISIBLE_H

#include "mokka.h"

/* Keep only the GPUs of a freshly parsed snapshot whose /dev/nvidia<minor> exists, when /dev/nvidiactl does,
 * renumbered densely in the file's order (topology peers and events follow); every GPU when there is no
 * /dev/nvidiactl. -1: out of memory, the snapshot unchanged. */
int mk_visible_select(struct mk_snap *s);

#endif
