/* buf.h — a growable byte buffer; the owner calls buf_free. Aborts on OOM. */
#ifndef OBLETH_BUF_H
#define OBLETH_BUF_H
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char *p; size_t n, cap; } obuf;

static inline void obuf_add(obuf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { fputs("obleth: out of memory\n", stderr); abort(); }
        b->p = p; b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static inline void obuf_adds(obuf *b, const char *s) { obuf_add(b, s, strlen(s)); }
static inline void obuf_free(obuf *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }
static inline void obuf_reset(obuf *b) { b->n = 0; if (b->p) b->p[0] = 0; }
#endif
