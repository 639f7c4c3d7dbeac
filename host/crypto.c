/*
 * crypto.c — hashing for secrets at rest (obleth.crypto), on OpenSSL's
 * libcrypto (EVP and HMAC one-shot functions).
 *
 *   sha256_hex(data)          -> 64 lowercase hex characters
 *   hmac_sha256_hex(key, data) -> 64 lowercase hex characters
 *   siphash128(key, data)     -> 16 bytes: SipHash-2-4-128 of data under key (16 bytes; any
 *                                other length raises). Not for secrets: a keyed hash for tables
 *                                (obleth.jsonscan.element_hashes keys its own with a process key)
 * Used to store client API keys hashed: the key itself is shown once and
 * never stored.
 */
#include "host.h"
#include "siphash.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

static void push_hex(lua_State *L, const unsigned char *md, unsigned int n) {
    static const char digits[] = "0123456789abcdef";
    char hex[2 * EVP_MAX_MD_SIZE];
    for (unsigned int i = 0; i < n; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    lua_pushlstring(L, hex, 2 * (size_t)n);
}

static int l_sha256_hex(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(s, n, md, &mdlen, EVP_sha256(), NULL)) return luaL_error(L, "sha256 failed");
    push_hex(L, md, mdlen);
    return 1;
}

static int l_hmac_sha256_hex(lua_State *L) {
    size_t kn, n;
    const char *k = luaL_checklstring(L, 1, &kn);
    const char *s = luaL_checklstring(L, 2, &n);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!HMAC(EVP_sha256(), k, (int)kn, (const unsigned char *)s, n, md, &mdlen))
        return luaL_error(L, "hmac-sha256 failed");
    push_hex(L, md, mdlen);
    return 1;
}

static int l_siphash128(lua_State *L) {
    size_t kn, n;
    const char *k = luaL_checklstring(L, 1, &kn);
    const char *s = luaL_checklstring(L, 2, &n);
    luaL_argcheck(L, kn == 16, 1, "the key must be 16 bytes");
    unsigned char out[16];
    obleth_siphash128((const unsigned char *)k, s, n, out);
    lua_pushlstring(L, (const char *)out, sizeof out);
    return 1;
}

int luaopen_obleth_crypto(lua_State *L) {
    static const luaL_Reg funcs[] = {{"sha256_hex", l_sha256_hex},
                                     {"hmac_sha256_hex", l_hmac_sha256_hex},
                                     {"siphash128", l_siphash128},
                                     {NULL, NULL}};
    luaL_newlib(L, funcs);
    return 1;
}
