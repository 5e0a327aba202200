/* _fastcount: exact o200k_base token counts, piece by piece, with a cache.
 *
 * count(text, fallback) returns exactly fallback(whole text), where fallback is
 * the exact counter (quicktok's o200k_base count, see tokens.py), or None when
 * the text is a str that has no UTF-8 form (lone surrogates); the caller then
 * counts it the reference way.
 *
 * Why this is exact.  A BPE tokenizer of the tiktoken family first splits the
 * text into pieces with the encoding's pre-tokenizer pattern, then encodes each
 * piece alone: the count of a text is the sum of the counts of its pieces, and
 * the count of a piece is fallback(piece) (a piece, split again alone, is one
 * piece: the pattern has no look-behind, and its only look-ahead, (?!\S), cannot
 * fail at the end of the text).  Piece counts are cached, so a piece is encoded
 * once per process; JSON catalogs are made of few distinct pieces (on the shared
 * corpora, 4% of piece bytes are first occurrences).
 *
 * The o200k_base pattern (tiktoken_ext.openai_public) is
 *
 *   1  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *   2  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *   3  \p{N}{1,3}
 *   4   ?[^\s\p{L}\p{N}]+[\r\n/]*
 *   5  \s*[\r\n]+
 *   6  \s+(?!\S)
 *   7  \s+
 *
 * matched leftmost-first, greedy, with backtracking.  piece_end() follows it by
 * hand over UTF-8: ASCII from a table, other code points by their general
 * category (unicodedata.category, asked once per code point and kept) and the
 * Unicode White_Space list (\s).  Marks are in [^\r\n\p{L}\p{N}] and in both
 * letter classes, so patterns 1 and 2 backtrack over them exactly as the regex
 * engine does.  In the contraction, U+017F (long s) case-folds to 's'; no other
 * non-ASCII code point folds into any of the contraction letters.
 *
 * When the match would have to look at a code point this Python's Unicode does
 * not assign (quicktok's tables are newer), or at invalid UTF-8, piece_end()
 * gives up, and the text from the start of that piece (a true piece boundary) to
 * the next boundary that does not depend on what comes before it goes to fallback
 * whole: a position after an ASCII letter and before an ASCII byte that is not a
 * letter and not an apostrophe always ends a piece (only patterns 1 and 2 take
 * letters, and after their letters they can only take more letters or marks, or
 * an apostrophe contraction).  That region's count is the sum of its pieces'
 * counts: it starts at a boundary, and its last piece ends in a letter, so the
 * end of the region cuts no match short.
 *
 * Fewer lookups: chunks.  That same kind of boundary cuts the text into chunks of
 * whole pieces, found by a plain byte scan: `":"string`, `","description`,
 * ` the`.  A chunk's count is cached whole; on a miss it is summed from its
 * pieces' counts (each cached too), so the pre-tokenizer runs only on chunks not
 * seen before.  Chunk and piece entries share one table: either is keyed by its
 * bytes and holds the count of those bytes.
 *
 * The count of a piece not in the cache.  Once load_ranks() has been given the
 * o200k_base vocabulary (tokens.py passes quicktok's own file, after checking
 * its sha256), a piece is encoded here, by tiktoken's byte-pair merge
 * (_byte_pair_merge in tiktoken's src/lib.rs: the whole piece if it is a token,
 * else merge the adjacent pair of lowest rank, leftmost first, until no pair is
 * a token), so quicktok's tokenizer, slow to load, is loaded only for a region
 * or a piece longer than BPE_MAX bytes.  Without ranks, misses go to fallback.
 *
 * The cache is an open-addressing table of at most CACHE_ENTRIES keys of at most
 * CACHE_KEY_MAX bytes each (longer ones are counted every time); when full it is
 * emptied and refills (bounded memory on registries of any size).  It is per
 * process and guarded by the GIL, which this module never releases.
 *
 * Tests compare the segmentation with the pattern itself (the regex module),
 * the ranks with quicktok's, and the counts with quicktok and tiktoken on every
 * corpus catalog, every code point in context and random text.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BAIL (-1)

/* ---- byte classes, for the chunk and region boundaries ------------------ */

enum {
    C_LETTER = 1, /* A-Z a-z */
    C_HI = 2,     /* a byte of a non-ASCII character */
    C_TERM = 4,   /* ASCII, neither a letter nor an apostrophe: ends a run of letters */
};

static unsigned char cls[256];

/* ---- code point classes, for the pre-tokenizer ------------------------- */

enum {
    F_UPC = 1,    /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
    F_LOC = 2,    /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
    F_L = 4,      /* \p{L} */
    F_N = 8,      /* \p{N} */
    F_WS = 16,    /* \s: White_Space */
    F_NL = 32,    /* \r \n */
    F_OT = 64,    /* none of the above (punctuation, symbols, controls, ...) */
    F_UNK = 128,  /* not assigned in this Python's Unicode, or invalid UTF-8 */
};
/* [^\r\n\p{L}\p{N}]: the optional first character of patterns 1 and 2 */
#define IS_P(f) ((f) != 0 && !((f) & (F_NL | F_L | F_N | F_UNK)))
/* [^\s\p{L}\p{N}]: pattern 4 */
#define IS_Q(f) ((f) != 0 && !((f) & (F_WS | F_L | F_N | F_UNK)))

static unsigned char ascii_flags[128];
static unsigned char *cp_flags;               /* 0x110000 entries, 0 = not asked yet */
static PyObject *category_of;                 /* unicodedata.category */

static void
init_classes(void)
{
    for (int b = 0; b < 256; b++) {
        unsigned char c = 0;
        int letter = (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z');
        if (b >= 0x80)
            c = C_HI;
        else if (letter)
            c = C_LETTER;
        else if (b != '\'')
            c = C_TERM;
        cls[b] = c;
        if (b >= 0x80)
            continue;
        unsigned char f;
        if (b >= 'A' && b <= 'Z') f = F_UPC | F_L;
        else if (b >= 'a' && b <= 'z') f = F_LOC | F_L;
        else if (b >= '0' && b <= '9') f = F_N;
        else if (b == '\r' || b == '\n') f = F_WS | F_NL;
        else if (b == ' ' || (b >= '\t' && b <= '\r')) f = F_WS;
        else f = F_OT;                        /* 0x1C-0x1F are not White_Space */
        ascii_flags[b] = f;
    }
}

static int
is_white_space(uint32_t cp)
{
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A)
        || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static unsigned char
classify(uint32_t cp)
{
    PyObject *ch = PyUnicode_FromOrdinal((int)cp);
    PyObject *cat = ch != NULL ? PyObject_CallOneArg(category_of, ch) : NULL;
    Py_XDECREF(ch);
    const char *c = cat != NULL && PyUnicode_Check(cat) ? PyUnicode_AsUTF8(cat) : NULL;
    unsigned char f = F_UNK;                  /* anything odd: the exact fallback decides */
    if (c != NULL && c[0] != '\0' && c[1] != '\0') {
        switch (c[0]) {
        case 'L':
            f = c[1] == 'u' || c[1] == 't' ? F_UPC | F_L
              : c[1] == 'l' ? F_LOC | F_L : F_UPC | F_LOC | F_L;      /* Lm, Lo */
            break;
        case 'M': f = F_UPC | F_LOC; break;
        case 'N': f = F_N; break;
        case 'C': f = c[1] == 'n' || c[1] == 's' ? F_UNK : F_OT; break;
        default: f = F_OT;
        }
        if (is_white_space(cp))
            f = F_WS;
    }
    if (c == NULL)
        PyErr_Clear();
    Py_XDECREF(cat);
    return f;
}

/* The flags of the code point at s[k] and its length in bytes (0 past the end,
 * 1 for invalid UTF-8, flagged F_UNK: Python replaces it, the fallback counts it). */
static inline int
code_at(const unsigned char *s, Py_ssize_t k, Py_ssize_t n, unsigned char *f, uint32_t *cp_out)
{
    if (k >= n) {
        *f = 0;
        *cp_out = 0;
        return 0;
    }
    unsigned char b = s[k];
    if (b < 0x80) {
        *f = ascii_flags[b];
        *cp_out = b;
        return 1;
    }
    int len;
    uint32_t cp;
    if (b >= 0xC2 && b <= 0xDF) { len = 2; cp = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) { len = 3; cp = b & 0x0F; }
    else if (b >= 0xF0 && b <= 0xF4) { len = 4; cp = b & 0x07; }
    else goto invalid;
    if (k + len > n)
        goto invalid;
    for (int j = 1; j < len; j++) {
        unsigned char c = s[k + j];
        if ((c & 0xC0) != 0x80)
            goto invalid;
        cp = (cp << 6) | (c & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)))
            || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        goto invalid;
    unsigned char got = cp_flags[cp];
    if (got == 0)
        got = cp_flags[cp] = classify(cp);
    *f = got;
    *cp_out = cp;
    return len;
invalid:
    *f = F_UNK;
    *cp_out = 0xFFFD;
    return 1;
}

/* The contraction (?i:'s|'t|'re|'ve|'m|'ll|'d)? at e: the end after it, or BAIL. */
static Py_ssize_t
contraction(const unsigned char *s, Py_ssize_t e, Py_ssize_t n)
{
    if (e >= n || s[e] != '\'')
        return e;
    unsigned char f1, f2;
    uint32_t c1, c2;
    int l1 = code_at(s, e + 1, n, &f1, &c1);
    if (f1 & F_UNK)
        return BAIL;
    int a = c1 == 0x17F ? 's' : c1 < 0x80 ? (int)(c1 | 0x20) : 0;
    if (l1 && (a == 's' || a == 't' || a == 'm' || a == 'd'))
        return e + 1 + l1;
    if (!l1 || !(a == 'r' || a == 'v' || a == 'l'))
        return e;
    int l2 = code_at(s, e + 1 + l1, n, &f2, &c2);
    if (f2 & F_UNK)
        return BAIL;
    int b = c2 == 0x17F ? 's' : c2 < 0x80 ? (int)(c2 | 0x20) : 0;
    if (l2 && ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')))
        return e + 1 + l1 + l2;
    return e;
}

/* The letters of patterns 1 and 2 from st.  Sets *upper_end to the end of the run
 * of [Lu Lt Lm Lo M] from st (what pattern 2's first class takes) and returns the
 * end of pattern 1's letters, 0 when pattern 1 cannot match there, or BAIL.  The
 * run of the upper class is greedy; when no [Ll Lm Lo M] follows it, the engine
 * backtracks to the last character of the run that is also in the lower class
 * (Lm, Lo or a mark) and ends right after it. */
static Py_ssize_t
letters(const unsigned char *s, Py_ssize_t st, Py_ssize_t n, Py_ssize_t *upper_end)
{
    unsigned char f;
    uint32_t cp;
    Py_ssize_t k = st, lower_in_run = 0;
    for (;;) {
        int len = code_at(s, k, n, &f, &cp);
        if (f & F_UNK)
            return BAIL;
        if (!(f & F_UPC))
            break;
        k += len;
        if (f & F_LOC)
            lower_in_run = k;
    }
    *upper_end = k;
    Py_ssize_t m = k;
    for (;;) {
        int len = code_at(s, m, n, &f, &cp);
        if (f & F_UNK)
            return BAIL;
        if (!(f & F_LOC))
            break;
        m += len;
    }
    if (m > k)
        return m;
    return lower_in_run;                      /* 0: no match */
}

/* The end of the piece that starts at i (< n), or BAIL. */
static Py_ssize_t
piece_end(const unsigned char *s, Py_ssize_t i, Py_ssize_t n)
{
    unsigned char f0, f;
    uint32_t cp;
    int len0 = code_at(s, i, n, &f0, &cp);
    if (f0 & F_UNK)
        return BAIL;

    /* Patterns 1 and 2: the optional [^\r\n\p{L}\p{N}] taken first, then not. */
    int with_p = IS_P(f0), alone = (f0 & (F_UPC | F_LOC)) != 0;
    Py_ssize_t up_p = 0, up_alone = 0, e;
    if (with_p) {
        e = letters(s, i + len0, n, &up_p);
        if (e == BAIL || e > 0)
            return e == BAIL ? BAIL : contraction(s, e, n);
    }
    if (alone) {
        e = letters(s, i, n, &up_alone);
        if (e == BAIL || e > 0)
            return e == BAIL ? BAIL : contraction(s, e, n);
    }
    if (with_p && up_p > i + len0)
        return contraction(s, up_p, n);
    if (alone && up_alone > i)
        return contraction(s, up_alone, n);

    /* Pattern 3: one to three digits. */
    if (f0 & F_N) {
        Py_ssize_t k = i;
        for (int d = 0; d < 3; d++) {
            int len = code_at(s, k, n, &f, &cp);
            if (f & F_UNK)
                return BAIL;
            if (!(f & F_N))
                break;
            k += len;
        }
        return k;
    }

    /* Pattern 4: an optional space, [^\s\p{L}\p{N}]+, then [\r\n/]*. */
    Py_ssize_t j = i;
    if (s[i] == ' ') {
        code_at(s, i + 1, n, &f, &cp);
        if (f & F_UNK)
            return BAIL;
        if (IS_Q(f))
            j = i + 1;
    }
    int len = code_at(s, j, n, &f, &cp);
    if (IS_Q(f)) {
        for (;;) {
            len = code_at(s, j, n, &f, &cp);
            if (f & F_UNK)
                return BAIL;
            if (!IS_Q(f))
                break;
            j += len;
        }
        while (j < n && (s[j] == '\r' || s[j] == '\n' || s[j] == '/'))
            j++;
        return j;
    }

    /* Patterns 5, 6, 7: a run of white space. */
    if (!(f0 & F_WS))
        return BAIL;                          /* unreachable: every class is covered above */
    Py_ssize_t k = i, after_nl = -1, last = i;
    int chars = 0;
    for (;;) {
        len = code_at(s, k, n, &f, &cp);
        if (f & F_UNK)
            return BAIL;
        if (!(f & F_WS))
            break;
        last = k;
        k += len;
        chars++;
        if (f & F_NL)
            after_nl = k;
    }
    if (after_nl >= 0)
        return after_nl;                      /* 5: through the last line break */
    if (k >= n || chars == 1)
        return k;                             /* 6 at the end, or 7 */
    return last;                              /* 6: all but the last character */
}

/* The first position after a non-ASCII byte at or after i that always ends a
 * piece, whatever comes before it: after an ASCII letter, before an ASCII byte
 * that is neither a letter nor an apostrophe (or the end). */
static Py_ssize_t
region_end(const unsigned char *s, Py_ssize_t i, Py_ssize_t n)
{
    Py_ssize_t q = i;
    while (q < n && !(cls[s[q]] & C_HI))
        q++;
    for (q++; q < n; q++)
        if ((cls[s[q]] & C_TERM) && (cls[s[q - 1]] & C_LETTER))
            return q;
    return n;
}

/* The next position after i that always ends a piece (see region_end), or n. */
static inline Py_ssize_t
next_boundary(const unsigned char *s, Py_ssize_t i, Py_ssize_t n)
{
    unsigned char prev = cls[s[i]];
    for (Py_ssize_t q = i + 1; q < n; q++) {
        unsigned char c = cls[s[q]];
        if ((c & C_TERM) && (prev & C_LETTER))
            return q;
        prev = c;
    }
    return n;
}

/* ---- hashing ------------------------------------------------------------ */

/* The first min(len, 8) bytes of p as a zero-padded word (len >= 1). */
static inline uint64_t
head_of(const unsigned char *p, Py_ssize_t len)
{
    uint64_t w = 0;
    if (len >= 8)
        memcpy(&w, p, 8);
    else
        for (Py_ssize_t k = 0; k < len; k++)
            w |= (uint64_t)p[k] << (8 * k);
    return w;
}

/* A hash of a key from its head and 8-byte words (the tail's last word overlaps
 * the one before it; len is hashed in). */
static inline uint32_t
hash_key(uint64_t head, const unsigned char *p, Py_ssize_t len)
{
    uint64_t h = head ^ ((uint64_t)len * 0x9E3779B97F4A7C15ull);
    for (Py_ssize_t k = 8; k < len; k += 8) {
        uint64_t w;
        memcpy(&w, p + (k + 8 <= len ? k : len - 8), 8);
        h = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull ^ w;
    }
    h = (h ^ (h >> 32)) * 0x94D049BB133111EBull;
    return (uint32_t)(h ^ (h >> 29));
}

/* ---- the vocabulary and the byte-pair merge ----------------------------- */

#define NO_RANK UINT32_MAX
#define BPE_MAX 256                           /* longer pieces go to the fallback */

typedef struct {
    uint32_t hash;
    uint32_t off;                             /* into vocab_bytes */
    uint32_t rank;
    uint32_t len;                             /* 0: empty slot */
} Rank;

static Rank *ranks;
static uint32_t ranks_mask, vocab_size;
static unsigned char *vocab_bytes;

static inline uint32_t
rank_of(const unsigned char *p, Py_ssize_t len)
{
    uint32_t h = hash_key(head_of(p, len), p, len);
    for (uint32_t at = h & ranks_mask;; at = (at + 1) & ranks_mask) {
        const Rank *r = &ranks[at];
        if (r->len == 0)
            return NO_RANK;
        if (r->hash == h && r->len == (uint32_t)len && memcmp(vocab_bytes + r->off, p, (size_t)len) == 0)
            return r->rank;
    }
}

/* The number of tokens of one piece (1 <= len <= BPE_MAX), as tiktoken encodes it. */
static long
bpe_count(const unsigned char *p, Py_ssize_t len)
{
    if (len == 1 || rank_of(p, len) != NO_RANK)
        return 1;
    Py_ssize_t start[BPE_MAX + 1];
    uint32_t rank[BPE_MAX + 1];
    Py_ssize_t parts = len + 1;
    for (Py_ssize_t i = 0; i + 1 < len; i++) {
        start[i] = i;
        rank[i] = rank_of(p + i, 2);
    }
    start[len - 1] = len - 1;
    rank[len - 1] = NO_RANK;
    start[len] = len;
    rank[len] = NO_RANK;
    for (;;) {
        uint32_t best = NO_RANK;
        Py_ssize_t at = -1;
        for (Py_ssize_t i = 0; i + 1 < parts; i++)
            if (rank[i] < best) {
                best = rank[i];
                at = i;
            }
        if (best == NO_RANK)
            break;
        /* merge parts at and at+1; the ranks around it, read before the removal */
        if (at > 0)
            rank[at - 1] = at + 2 < parts ? rank_of(p + start[at - 1], start[at + 2] - start[at - 1]) : NO_RANK;
        rank[at] = at + 3 < parts ? rank_of(p + start[at], start[at + 3] - start[at]) : NO_RANK;
        memmove(start + at + 1, start + at + 2, sizeof(start[0]) * (size_t)(parts - at - 2));
        memmove(rank + at + 1, rank + at + 2, sizeof(rank[0]) * (size_t)(parts - at - 2));
        parts--;
    }
    return parts - 1;
}

/* ---- the count cache ---------------------------------------------------- */

#define CACHE_SLOTS (1u << 17)                /* a power of two */
#define CACHE_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_KEY_MAX 64
#define ARENA_BYTES (CACHE_ENTRIES * 16u)     /* bytes past each key's head */

typedef struct {
    uint64_t head;                            /* the first 8 bytes, zero-padded */
    uint32_t hash;
    uint32_t off;                             /* of the bytes after the head, in arena */
    int32_t count;
    uint16_t len;                             /* 0: empty slot */
} Slot;

static Slot *slots;
static unsigned char *arena;
static uint32_t arena_used, entries;
static uint64_t hits, misses, encoded;

static void
cache_reset(void)
{
    memset(slots, 0, sizeof(Slot) * CACHE_SLOTS);
    arena_used = entries = 0;
}

/* The cached count of p[0:len] (len <= CACHE_KEY_MAX), or -1; *head_out and
 * *hash_out are for cache_put. */
static inline long
cache_get(const unsigned char *p, Py_ssize_t len, uint64_t *head_out, uint32_t *hash_out)
{
    uint64_t head = head_of(p, len);
    uint32_t h = hash_key(head, p, len);
    *head_out = head;
    *hash_out = h;
    for (uint32_t at = h & (CACHE_SLOTS - 1);; at = (at + 1) & (CACHE_SLOTS - 1)) {
        const Slot *slot = &slots[at];
        if (slot->len == 0)
            return -1;
        if (slot->hash == h && slot->len == len && slot->head == head
                && (len <= 8 || memcmp(arena + slot->off, p + 8, (size_t)(len - 8)) == 0)) {
            hits++;
            return slot->count;
        }
    }
}

static void
cache_put(const unsigned char *p, Py_ssize_t len, uint64_t head, uint32_t h, long v)
{
    if (v > INT32_MAX)
        return;
    Py_ssize_t rest = len > 8 ? len - 8 : 0;
    if (entries >= CACHE_ENTRIES || arena_used + (uint32_t)rest > ARENA_BYTES)
        cache_reset();
    uint32_t at = h & (CACHE_SLOTS - 1);
    while (slots[at].len != 0)
        at = (at + 1) & (CACHE_SLOTS - 1);
    Slot *slot = &slots[at];
    if (rest)
        memcpy(arena + arena_used, p + 8, (size_t)rest);
    slot->head = head;
    slot->hash = h;
    slot->off = arena_used;
    slot->len = (uint16_t)len;
    slot->count = (int32_t)v;
    arena_used += (uint32_t)rest;
    entries++;
}

/* fallback(p[0:len]) as a C long, or -1 with an exception set. */
static long
call_fallback(PyObject *fallback, const unsigned char *p, Py_ssize_t len)
{
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p, len, "replace");
    if (text == NULL)
        return -1;
    PyObject *got = PyObject_CallOneArg(fallback, text);
    Py_DECREF(text);
    if (got == NULL)
        return -1;
    long v = PyLong_AsLong(got);
    Py_DECREF(got);
    if (v < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "the fallback counter returned a negative count");
    return v;
}

/* The count of one piece (whole = 0) or one region (whole = 1), through the cache. */
static long
count_segment(PyObject *fallback, const unsigned char *p, Py_ssize_t len, int whole)
{
    uint64_t head = 0;
    uint32_t h = 0;
    if (len <= CACHE_KEY_MAX) {
        long v = cache_get(p, len, &head, &h);
        if (v >= 0)
            return v;
    }
    misses++;
    long v;
    if (!whole && vocab_size != 0 && len <= BPE_MAX) {
        v = bpe_count(p, len);
        encoded++;
    }
    else
        v = call_fallback(fallback, p, len);
    if (v >= 0 && len <= CACHE_KEY_MAX)
        cache_put(p, len, head, h, v);
    return v;
}

/* The count of s[i:q], a chunk between two boundaries: cached whole; on a miss,
 * the sum of its segments' counts (a piece that meets a code point it cannot
 * class widens to a region, which never passes q: q is a boundary after it). */
static long
count_chunk(PyObject *fallback, const unsigned char *s, Py_ssize_t i, Py_ssize_t q, Py_ssize_t n)
{
    Py_ssize_t len = q - i;
    uint64_t head = 0;
    uint32_t h = 0;
    if (len <= CACHE_KEY_MAX) {
        long v = cache_get(s + i, len, &head, &h);
        if (v >= 0)
            return v;
    }
    long total = 0;
    int segments = 0;
    for (Py_ssize_t j = i; j < q; segments++) {
        Py_ssize_t e = piece_end(s, j, n);
        int whole = e == BAIL;
        if (whole)
            e = region_end(s, j, n);
        long v = count_segment(fallback, s + j, e - j, whole);
        if (v < 0)
            return -1;
        total += v;
        j = e;
    }
    if (segments > 1 && len <= CACHE_KEY_MAX)   /* one segment: cached as that segment */
        cache_put(s + i, len, head, h, total);
    return total;
}

/* ---- the module --------------------------------------------------------- */

/* The UTF-8 bytes of a str or bytes-like object.  0 with *ok = 0 when a str has
 * no UTF-8 form (lone surrogates); -1 with an exception on a wrong type. */
static int
utf8_of(PyObject *obj, Py_buffer *view, const unsigned char **s, Py_ssize_t *n, int *ok)
{
    *ok = 1;
    view->obj = NULL;
    if (PyUnicode_Check(obj)) {
        const char *p = PyUnicode_AsUTF8AndSize(obj, n);
        if (p == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                return -1;
            PyErr_Clear();
            *ok = 0;
            return 0;
        }
        *s = (const unsigned char *)p;
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    *s = (const unsigned char *)view->buf;
    *n = view->len;
    return 0;
}

PyDoc_STRVAR(count_doc,
"count(text, fallback) -> int | None\n\n"
"Exact token count of text (str or UTF-8 bytes, invalid bytes counted as U+FFFD):\n"
"the sum of its pre-tokenizer pieces' counts, each cached; a piece not cached is\n"
"encoded here when load_ranks() was given the vocabulary, else by fallback(piece).\n"
"None for a str with lone surrogates.");

static PyObject *
fastcount_count(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "count(text, fallback) takes two arguments");
        return NULL;
    }
    Py_buffer view;
    const unsigned char *s = NULL;
    Py_ssize_t n = 0;
    int ok;
    if (utf8_of(args[0], &view, &s, &n, &ok) < 0)
        return NULL;
    if (!ok)
        Py_RETURN_NONE;
    long long total = 0;
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t q = next_boundary(s, i, n);
        long v = count_chunk(args[1], s, i, q, n);
        if (v < 0) {
            if (view.obj != NULL)
                PyBuffer_Release(&view);
            return NULL;
        }
        total += v;
        i = q;
    }
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    return PyLong_FromLongLong(total);
}

PyDoc_STRVAR(segments_doc,
"segments(text) -> list[tuple[int, int, bool]]\n\n"
"How count() splits the UTF-8 bytes of text: (start, end, whole) per segment,\n"
"byte offsets; whole is True for a region handed to the fallback whole, False for\n"
"one pre-tokenizer piece.  For the tests.");

static PyObject *
fastcount_segments(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    const unsigned char *s = NULL;
    Py_ssize_t n = 0;
    int ok;
    if (utf8_of(arg, &view, &s, &n, &ok) < 0)
        return NULL;
    if (!ok)
        Py_RETURN_NONE;
    PyObject *out = PyList_New(0);
    Py_ssize_t i = 0;
    while (out != NULL && i < n) {
        Py_ssize_t e = piece_end(s, i, n);
        int whole = e == BAIL;
        if (whole)
            e = region_end(s, i, n);
        PyObject *item = Py_BuildValue("(nnO)", i, e, whole ? Py_True : Py_False);
        if (item == NULL || PyList_Append(out, item) < 0)
            Py_CLEAR(out);
        Py_XDECREF(item);
        i = e;
    }
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    return out;
}

PyDoc_STRVAR(load_ranks_doc,
"load_ranks(vocab) -> int\n\n"
"Load an o200k_base vocabulary in quicktok's file layout: a little-endian u32\n"
"count, then per token a u16 length, its bytes and a u32 rank, ranks 0..count-1\n"
"each once.  Returns the number of tokens; ValueError if the layout is not that\n"
"(nothing is loaded then).  Empties the count cache.");

static PyObject *
fastcount_load_ranks(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len, off = 4;
    uint32_t count = 0, size = 1;
    Rank *table = NULL;
    unsigned char *bytes = NULL, *seen = NULL;
    const char *why = NULL;
    if (n < 4) {
        why = "too short";
        goto fail;
    }
    memcpy(&count, b, 4);
    if (count < 256 || count > (1u << 24) || (Py_ssize_t)count * 7 > n) {
        why = "implausible token count";
        goto fail;
    }
    while (size < count * 2u)
        size <<= 1;
    table = PyMem_RawCalloc(size, sizeof(Rank));
    bytes = PyMem_RawMalloc((size_t)n);
    seen = PyMem_RawCalloc(count, 1);
    if (table == NULL || bytes == NULL || seen == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    uint32_t used = 0;
    for (uint32_t t = 0; t < count; t++) {
        uint16_t len;
        uint32_t rank;
        if (off + 2 > n) { why = "truncated"; goto fail; }
        memcpy(&len, b + off, 2);
        off += 2;
        if (len == 0 || len > BPE_MAX || off + len + 4 > n) { why = "bad token length"; goto fail; }
        const unsigned char *tok = b + off;
        memcpy(&rank, b + off + len, 4);
        off += len + 4;
        if (rank >= count || seen[rank]) { why = "bad or repeated rank"; goto fail; }
        seen[rank] = 1;
        memcpy(bytes + used, tok, len);
        uint32_t h = hash_key(head_of(tok, len), tok, len);
        uint32_t at = h & (size - 1);
        while (table[at].len != 0) {
            if (table[at].len == len && memcmp(bytes + table[at].off, tok, len) == 0) {
                why = "repeated token";
                goto fail;
            }
            at = (at + 1) & (size - 1);
        }
        table[at] = (Rank){h, used, rank, len};
        used += len;
    }
    if (off != n) {
        why = "trailing bytes";
        goto fail;
    }
    PyMem_RawFree(seen);
    PyBuffer_Release(&view);
    PyMem_RawFree(ranks);
    PyMem_RawFree(vocab_bytes);
    ranks = table;
    ranks_mask = size - 1;
    vocab_bytes = bytes;
    vocab_size = count;
    cache_reset();
    return PyLong_FromUnsignedLong(count);
fail:
    PyMem_RawFree(table);
    PyMem_RawFree(bytes);
    PyMem_RawFree(seen);
    PyBuffer_Release(&view);
    if (why != NULL)
        PyErr_Format(PyExc_ValueError, "not a vocabulary in quicktok's layout: %s (at byte %zd)", why, off);
    return NULL;
}

static PyObject *
fastcount_rank(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t r = vocab_size != 0 && view.len > 0 ? rank_of(view.buf, view.len) : NO_RANK;
    PyBuffer_Release(&view);
    if (r == NO_RANK)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(r);
}

static PyObject *
fastcount_cache_info(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("{s:I,s:I,s:K,s:K,s:K,s:I,s:I,s:I}", "entries", entries, "arena_bytes", arena_used,
                         "hits", (unsigned long long)hits, "misses", (unsigned long long)misses,
                         "encoded", (unsigned long long)encoded, "vocabulary", vocab_size,
                         "max_entries", (unsigned)CACHE_ENTRIES, "max_key_bytes", (unsigned)CACHE_KEY_MAX);
}

static PyObject *
fastcount_cache_clear(PyObject *self, PyObject *unused)
{
    cache_reset();
    hits = misses = encoded = 0;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"count", (PyCFunction)(void (*)(void))fastcount_count, METH_FASTCALL, count_doc},
    {"segments", fastcount_segments, METH_O, segments_doc},
    {"load_ranks", fastcount_load_ranks, METH_O, load_ranks_doc},
    {"rank", fastcount_rank, METH_O, "rank(token) -> int | None: the rank of a token of the loaded vocabulary."},
    {"cache_info", fastcount_cache_info, METH_NOARGS, "cache_info() -> dict: the count cache's size and use."},
    {"cache_clear", fastcount_cache_clear, METH_NOARGS, "cache_clear() -> None: empty the count cache."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastcount",
    "Exact o200k_base token counts piece by piece, with a per-process cache.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__fastcount(void)
{
    init_classes();
    if (category_of == NULL) {
        PyObject *unicodedata = PyImport_ImportModule("unicodedata");
        if (unicodedata == NULL)
            return NULL;
        category_of = PyObject_GetAttrString(unicodedata, "category");
        Py_DECREF(unicodedata);
        if (category_of == NULL)
            return NULL;
    }
    if (slots == NULL) {
        slots = PyMem_RawCalloc(CACHE_SLOTS, sizeof(Slot));
        arena = PyMem_RawMalloc(ARENA_BYTES);
        cp_flags = PyMem_RawCalloc(0x110000, 1);
        if (slots == NULL || arena == NULL || cp_flags == NULL)
            return PyErr_NoMemory();
    }
    return PyModule_Create(&module);
}
