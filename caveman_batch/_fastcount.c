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
 * fail at the end of the text).  Piece counts are cached, so the BPE of a piece
 * runs once per process; JSON catalogs are made of few distinct pieces (on the
 * shared corpora, 4% of piece bytes are first occurrences).
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
 * matched leftmost-first, greedy, with backtracking.  piece_end() below follows
 * it by hand for ASCII text, where the classes are plain: letters A-Z / a-z,
 * digits 0-9, \s = \t \n \v \f \r and space (Unicode White_Space: 0x1C-0x1F are
 * not in it), everything else "other".  Whenever the match would have to look at
 * a non-ASCII byte (a letter? a mark? a Unicode space? a digit? a long s that
 * case-folds to 's?) it gives up, and the text from the start of that piece (a
 * true piece boundary) to the next boundary that does not depend on what comes
 * before it goes to fallback whole: a position after an ASCII letter and before
 * an ASCII byte that is not a letter and not an apostrophe always ends a piece
 * (only patterns 1 and 2 take letters, and after their letters they can only take
 * more letters or marks, or an apostrophe contraction).  That region's count is
 * the sum of its pieces' counts: it starts at a boundary, and its last piece
 * ends in a letter, so the end of the region cuts no match short.  Tests compare
 * the segmentation with the pattern itself (the regex module) and the counts
 * with quicktok and tiktoken on every corpus catalog and on random text.
 *
 * Fewer lookups: chunks.  That same kind of boundary (after an ASCII letter,
 * before an ASCII non-letter, non-apostrophe) cuts the text into chunks of whole
 * pieces, found by a plain byte scan: `":"string`, `","description`, ` the`.  A
 * chunk's count is cached whole; on a miss it is summed from its pieces' counts
 * (each cached too), so the pre-tokenizer runs only on chunks not seen before.
 * Chunk and piece entries share one table: either is keyed by its bytes and
 * holds fallback(those bytes).
 *
 * The cache is an open-addressing table of at most CACHE_ENTRIES keys of at most
 * CACHE_KEY_MAX bytes each (longer ones are counted every time); when full it is
 * emptied and refills (bounded memory on registries of any size).  It is per
 * process and guarded by the GIL, which this module never releases.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- byte classes ------------------------------------------------------- */

enum {
    C_UP = 1,     /* A-Z */
    C_LO = 2,     /* a-z */
    C_DG = 4,     /* 0-9 */
    C_SP = 8,     /* \t \n \v \f \r space */
    C_NL = 16,    /* \r \n */
    C_HI = 32,    /* a byte of a non-ASCII character: unknown class */
    C_OT = 64,    /* any other ASCII byte: [^\s\p{L}\p{N}] */
    C_TERM = 128, /* ASCII, neither a letter nor an apostrophe: ends a run of letters */
};
#define C_LETTER (C_UP | C_LO)

static unsigned char cls[256];

static void
init_classes(void)
{
    for (int b = 0; b < 256; b++) {
        unsigned char c;
        if (b >= 0x80) c = C_HI;
        else if (b >= 'A' && b <= 'Z') c = C_UP;
        else if (b >= 'a' && b <= 'z') c = C_LO;
        else if (b >= '0' && b <= '9') c = C_DG;
        else if (b == '\r' || b == '\n') c = C_SP | C_NL;
        else if (b == ' ' || (b >= '\t' && b <= '\r')) c = C_SP;
        else c = C_OT;
        if (b < 0x80 && !(c & C_LETTER) && b != '\'')
            c |= C_TERM;
        cls[b] = c;
    }
}

#define BAIL (-1)

/* Class of s[k], 0 past the end. */
#define AT(k) ((k) < n ? cls[s[(k)]] : 0)

/* The contraction (?i:'s|'t|'re|'ve|'m|'ll|'d)? at e: the end after it, or BAIL. */
static inline Py_ssize_t
contraction(const unsigned char *s, Py_ssize_t e, Py_ssize_t n)
{
    if (e >= n || s[e] != '\'')
        return e;
    if ((AT(e + 1) | AT(e + 2)) & C_HI)
        return BAIL;                          /* Unicode case folding: U+017F is 's */
    if (e + 1 >= n)
        return e;
    unsigned char a = (unsigned char)(s[e + 1] | 0x20);
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return e + 2;
    if (e + 2 >= n)
        return e;
    unsigned char b = (unsigned char)(s[e + 2] | 0x20);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return e + 3;
    return e;
}

/* The end of the piece that starts at i (< n), or BAIL. */
static Py_ssize_t
piece_end(const unsigned char *s, Py_ssize_t i, Py_ssize_t n)
{
    unsigned char c = cls[s[i]];
    if (c & C_HI)
        return BAIL;

    /* Patterns 1 and 2: an optional [^\r\n\p{L}\p{N}], then letters. */
    Py_ssize_t st = -1;
    if (c & C_LETTER)
        st = i;
    else if (!(c & (C_DG | C_NL))) {
        if (AT(i + 1) & C_HI)
            return BAIL;
        if (AT(i + 1) & C_LETTER)
            st = i + 1;
    }
    if (st >= 0) {
        Py_ssize_t k = st;
        while (k < n && (cls[s[k]] & C_UP))
            k++;
        Py_ssize_t m = k;
        while (m < n && (cls[s[m]] & C_LO))
            m++;
        if (AT(m) & C_HI)
            return BAIL;
        /* m > st: pattern 1 (upper* lower+) when m > k, else pattern 2 (upper+). */
        return contraction(s, m, n);
    }

    /* Pattern 3: one to three digits. */
    if (c & C_DG) {
        Py_ssize_t k = i + 1;
        while (k < n && k < i + 3 && (cls[s[k]] & C_DG))
            k++;
        if (k < i + 3 && (AT(k) & C_HI))
            return BAIL;
        return k;
    }

    /* Pattern 4: an optional space, others, then [\r\n/]*. */
    Py_ssize_t j = s[i] == ' ' ? i + 1 : i;
    if (AT(j) & C_OT) {
        while (j < n && (cls[s[j]] & C_OT))
            j++;
        if (AT(j) & C_HI)
            return BAIL;
        while (j < n && (s[j] == '\r' || s[j] == '\n' || s[j] == '/'))
            j++;
        return j;
    }

    /* Patterns 5, 6, 7: a run of white space. */
    Py_ssize_t k = i, last_nl = -1;
    while (k < n && (cls[s[k]] & C_SP)) {
        if (cls[s[k]] & C_NL)
            last_nl = k;
        k++;
    }
    if (AT(k) & C_HI)
        return BAIL;
    if (last_nl >= 0)
        return last_nl + 1;                   /* 5: through the last line break */
    if (k == n || k - i == 1)
        return k;                             /* 6 at the end, or 7 */
    return k - 1;                             /* 6: all but the last */
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

/* ---- the piece cache ---------------------------------------------------- */

#define CACHE_SLOTS (1u << 17)                /* a power of two */
#define CACHE_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_KEY_MAX 64
#define ARENA_BYTES (CACHE_ENTRIES * 16u)        /* bytes past each key's head */

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
static uint64_t hits, misses;

static void
cache_reset(void)
{
    memset(slots, 0, sizeof(Slot) * CACHE_SLOTS);
    arena_used = entries = 0;
}

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

/* A hash of the piece from its head and 8-byte words (the tail's last word
 * overlaps the one before it: len is hashed in, so no two keys share a walk). */
static inline uint32_t
hash_piece(uint64_t head, const unsigned char *p, Py_ssize_t len)
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

/* fallback(text[0:len]) as a C long, or -1 with an exception set. */
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

/* The cached count of p[0:len] (len <= CACHE_KEY_MAX), or -1; *slot_at and *hash
 * say where to store it. */
static inline long
cache_get(const unsigned char *p, Py_ssize_t len, uint64_t *head_out, uint32_t *hash_out)
{
    uint64_t head = head_of(p, len);
    uint32_t h = hash_piece(head, p, len);
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

/* fallback(p[0:len]) through the cache: p[0:len] must start and end on piece
 * boundaries. */
static long
count_cached(PyObject *fallback, const unsigned char *p, Py_ssize_t len)
{
    if (len > CACHE_KEY_MAX)
        return call_fallback(fallback, p, len);
    uint64_t head;
    uint32_t h;
    long v = cache_get(p, len, &head, &h);
    if (v >= 0)
        return v;
    misses++;
    v = call_fallback(fallback, p, len);
    if (v >= 0)
        cache_put(p, len, head, h, v);
    return v;
}

/* The next position after i that always ends a piece, whatever comes before it:
 * after an ASCII letter, before an ASCII byte that is neither a letter nor an
 * apostrophe; or n. */
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

/* The count of s[i:q], a chunk between two such boundaries: cached whole; on a
 * miss, the sum of its pieces' cached counts (a piece that meets a non-ASCII byte
 * widens to a region, which never passes q: q is a boundary after it). */
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
    Py_ssize_t j = i;
    while (j < q) {
        Py_ssize_t e = piece_end(s, j, n);
        if (e == BAIL)
            e = region_end(s, j, n);
        if (e == q && j == i)                 /* the chunk is one piece or region */
            break;
        long v = count_cached(fallback, s + j, e - j);
        if (v < 0)
            return -1;
        total += v;
        j = e;
    }
    if (j == i) {                             /* as one piece: counted and cached below */
        misses++;
        total = call_fallback(fallback, s + i, len);
        if (total < 0)
            return -1;
    }
    if (len <= CACHE_KEY_MAX)
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
"the sum of fallback(piece) over its pre-tokenizer pieces, each piece's count\n"
"cached.  None for a str with lone surrogates.");

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
    PyObject *fallback = args[1];
    long long total = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t q = next_boundary(s, i, n);
        long v = count_chunk(fallback, s, i, q, n);
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
"byte offsets; whole is True for a region handed to the fallback whole (it held a\n"
"non-ASCII byte), False for one pre-tokenizer piece.  For the tests.");

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

static PyObject *
fastcount_cache_info(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("{s:I,s:I,s:K,s:K,s:I,s:I}", "entries", entries, "arena_bytes", arena_used,
                         "hits", (unsigned long long)hits, "misses", (unsigned long long)misses,
                         "max_entries", (unsigned)CACHE_ENTRIES, "max_key_bytes", (unsigned)CACHE_KEY_MAX);
}

static PyObject *
fastcount_cache_clear(PyObject *self, PyObject *unused)
{
    cache_reset();
    hits = misses = 0;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"count", (PyCFunction)(void (*)(void))fastcount_count, METH_FASTCALL, count_doc},
    {"segments", fastcount_segments, METH_O, segments_doc},
    {"cache_info", fastcount_cache_info, METH_NOARGS, "cache_info() -> dict: the piece cache's size and use."},
    {"cache_clear", fastcount_cache_clear, METH_NOARGS, "cache_clear() -> None: empty the piece cache."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastcount",
    "Exact o200k_base token counts piece by piece, with a per-process cache.", -1, methods,
};

PyMODINIT_FUNC
PyInit__fastcount(void)
{
    init_classes();
    if (slots == NULL) {
        slots = PyMem_RawCalloc(CACHE_SLOTS, sizeof(Slot));
        arena = PyMem_RawMalloc(ARENA_BYTES);
        if (slots == NULL || arena == NULL)
            return PyErr_NoMemory();
    }
    return PyModule_Create(&module);
}
