/*
 * siphash.h — SipHash-2-4 with a 128-bit output (Aumasson & Bernstein, the reference's
 * outlen = 16 variant): a keyed hash of a byte string, for tables keyed by long texts that an
 * outsider may choose (a Slurm job's name and comment are any cluster user's), where the text itself
 * would cost too much to keep.
 */
#ifndef OBLETH_SIPHASH_H
#define OBLETH_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* out (16 bytes, caller's) = SipHash-2-4-128 of data[0..len) under key (16 bytes). */
void obleth_siphash128(const unsigned char key[16], const void *data, size_t len, unsigned char out[16]);

/* This process's key for obleth_siphash128, drawn from getrandom(2) on first use (the same
   key for the process's life; never exposed to Lua). Returns NULL when no randomness could be
   had (the caller raises). */
const unsigned char *obleth_siphash_process_key(void);

#endif
