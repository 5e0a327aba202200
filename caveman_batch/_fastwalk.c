/* caveman_batch/_fastwalk.c: the tool-catalog compressor in one pass over the bytes.
 *
 * catalog.compress() defines the result with its pure-Python path:
 *
 *     doc = parse(raw)            json.loads with hooks: strict, literals as written
 *     rewrite(doc, options)       _Walk: reduce descriptions, drop annotation keys
 *     out = serialize(doc)        orjson.dumps
 *
 * rewrite() below does the three at once and produces the same bytes. It never
 * decides alone: Python tells it where the tools are (a plan computed with
 * skim() + locate_tools), and for anything outside what it handles exactly
 * (invalid JSON or UTF-8, a BOM, duplicate keys, lone surrogates, NaN, nesting
 * deeper than MAX_NESTING, a structure that disagrees with the plan, a reducer
 * that raises or returns something odd) it returns None, and the caller runs the
 * Python path, which then gives the result and every passthrough reason.
 *
 * Layout of this file: output buffers; the JSON lexer (white space, strings,
 * numbers, literals); the generic object and array readers, which call one
 * function per member or element; the roles a value can have (copied, a tool,
 * a schema, a name map, the path to the tools); skim() (the top levels of a
 * document as Python objects, for the plan); spans(); search_fields() (a parsed
 * tool's search text); index_tools() (what `compress --index` needs of each tool
 * compress located, its search text read from its bytes); the module.
 *
 * Every reader returns FW_OK, FW_DECLINE (give the input back: return None) or
 * FW_ERROR (a Python exception is set and propagates: MemoryError, or a
 * KeyboardInterrupt raised inside the reducer). Recursion is bounded by
 * MAX_NESTING open containers, checked before each one is entered.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The bytes hash of CPython (SipHash, seeded per process): public as Py_HashBuffer
   from 3.14; before that, the same function through PyHash_GetFuncDef(). */
#if PY_VERSION_HEX >= 0x030E0000
#define fw_hash_bytes(p, n) Py_HashBuffer((p), (Py_ssize_t)(n))
#else
#define fw_hash_bytes(p, n) (PyHash_GetFuncDef()->hash((p), (Py_ssize_t)(n)))
#endif

#include <stdint.h>
#include <string.h>

#define MAX_NESTING 200   /* catalog.MAX_DEPTH: deeper documents go to Python */
#define SMALL_OBJECT 16   /* up to this many keys, duplicates are found pairwise */

enum {
    FW_OK = 0,
    FW_DECLINE = -1,      /* outside what we handle exactly: the caller gets None */
    FW_ERROR = -2,        /* a Python exception is set */
    FW_DROP = 1,          /* a member reader's answer: parsed, but leave it out */
};


/* -- buffers ----------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

/* Make room for `extra` more bytes; -1 with MemoryError set on failure. */
static int
buf_grow(Buf *b, Py_ssize_t extra)
{
    if (extra > PY_SSIZE_T_MAX - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = b->len + extra;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        cap = cap > PY_SSIZE_T_MAX / 2 ? need : cap * 2;
    }
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int
buf_reserve(Buf *b, Py_ssize_t extra)
{
    return b->cap - b->len >= extra ? 0 : buf_grow(b, extra);
}

static inline int
buf_put(Buf *b, const char *p, Py_ssize_t n)
{
    if (n == 0) {
        return 0;
    }
    if (buf_reserve(b, n) < 0) {
        return -1;
    }
    memcpy(b->data + b->len, p, (size_t)n);
    b->len += n;
    return 0;
}

static inline int
buf_byte(Buf *b, char c)
{
    if (buf_reserve(b, 1) < 0) {
        return -1;
    }
    b->data[b->len++] = c;
    return 0;
}

/* The walker's output, written unless it only reads (Walker.quiet, for skim). */
#define OUT_BYTE(w, c) ((w)->quiet ? 0 : buf_byte(&(w)->out, (c)))
#define OUT_PUT(w, p, n) ((w)->quiet ? 0 : buf_put(&(w)->out, (p), (n)))


/* -- walker state --------------------------------------------------------------- */

/* A key of an open object: its decoded UTF-8 in Walker.keybytes. */
typedef struct {
    Py_ssize_t off;
    Py_ssize_t len;
} KeyRef;

typedef struct {
    const unsigned char *src;   /* the raw document */
    Py_ssize_t end;             /* its length */
    Py_ssize_t pos;             /* the next byte to read */
    int nesting;                /* containers open around pos */
    int quiet;                  /* read and check only, write nothing to out (skim) */

    Buf out;                    /* the serialized result */
    Buf scratch;                /* the last decoded string that had escapes */
    Buf keybytes;               /* keys of the open objects, innermost last */
    KeyRef *keys;
    Py_ssize_t nkeys;
    Py_ssize_t keys_cap;

    int drop_annotations;
    Py_ssize_t short_bytes;
    PyObject *reducer;          /* borrowed */
    Py_ssize_t reduced;         /* descriptions the reducer changed */
    Py_ssize_t dropped;         /* annotation members left out */
    PyObject *tool_spans;       /* borrowed: a list to append each tool's spans to, or NULL */
} Walker;

static void
walker_free(Walker *w)
{
    PyMem_Free(w->out.data);
    PyMem_Free(w->scratch.data);
    PyMem_Free(w->keybytes.data);
    PyMem_Free(w->keys);
}

/* The next byte, or 0 at the end (0 is valid nowhere, so it always declines). */
static inline unsigned char
peek(const Walker *w)
{
    return w->pos < w->end ? w->src[w->pos] : 0;
}

/* Word-at-a-time tests on 8 bytes. Exact as booleans; as positions, only the
   first (lowest-addressed) flagged byte is exact: a borrow runs upward only,
   and only out of a byte that matched. FIRST_HIT gives that byte's index where
   the byte order is known, else 0 (the byte loop after it then finds it). */
#define ONES  0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FIRST_HIT(mask) ((Py_ssize_t)(__builtin_ctzll(mask) >> 3))
#else
#define FIRST_HIT(mask) ((Py_ssize_t)0)
#endif

static inline uint64_t
load8(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Nonzero if some byte of v is zero. */
static inline uint64_t
has_zero(uint64_t v)
{
    return (v - ONES) & ~v & HIGHS;
}

/* Nonzero if some byte of v is below n (n <= 128). */
static inline uint64_t
has_less(uint64_t v, unsigned char n)
{
    return (v - ONES * n) & ~v & HIGHS;
}

static inline void
skip_ws(Walker *w)
{
    const unsigned char *s = w->src;
    Py_ssize_t i = w->pos;
    Py_ssize_t end = w->end;
    /* indented documents: a line break, then a run of spaces */
    if (i < end && s[i] == '\n') {
        i++;
        while (end - i >= 8 && load8(s + i) == ONES * ' ') {
            i += 8;
        }
    }
    while (i < end && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) {
        i++;
    }
    w->pos = i;
}


/* -- strings ----------------------------------------------------------------- */

/* Bytes that a string may hold raw and that end no fast run: printable ASCII
   (0x7f included) but '"' and '\\'. Control characters must be escaped in JSON;
   bytes >= 0x80 go through the UTF-8 check. */
static unsigned char PLAIN[256];

/* Length of each byte's escaped form as orjson writes it: 1 (raw), 2 (\" \\ \b
   \t \n \f \r) or 6 (\u00XX with lower-case hex, the other control characters).
   Non-ASCII characters, 0x7f and U+2028 are written raw. */
static unsigned char ESCAPED_LEN[256];

static void
init_tables(void)
{
    for (int c = 0; c < 256; c++) {
        PLAIN[c] = (c >= 0x20 && c < 0x80 && c != '"' && c != '\\');
        ESCAPED_LEN[c] = c >= 0x20 ? 1 : 6;
    }
    ESCAPED_LEN['"'] = ESCAPED_LEN['\\'] = 2;
    ESCAPED_LEN['\b'] = ESCAPED_LEN['\t'] = ESCAPED_LEN['\n'] = 2;
    ESCAPED_LEN['\f'] = ESCAPED_LEN['\r'] = 2;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes available), or 0.
   As strict as Python's decoder: no overlong forms, no encoded surrogates,
   nothing above U+10FFFF. */
static inline Py_ssize_t
utf8_sequence(const unsigned char *s, Py_ssize_t n)
{
    unsigned char c = s[0];
    if (c >= 0xC2 && c <= 0xDF) {
        return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[2] & 0xC0) != 0x80) {
            return 0;
        }
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;
        unsigned char hi = c == 0xED ? 0x9F : 0xBF;
        return s[1] >= lo && s[1] <= hi ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) {
            return 0;
        }
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
        unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;
        return s[1] >= lo && s[1] <= hi ? 4 : 0;
    }
    return 0;
}

static inline int
hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The code unit of the four hex digits at s; the lexer has checked them. */
static inline unsigned int
hex4(const unsigned char *s)
{
    return (unsigned int)(hex_value(s[0]) << 12 | hex_value(s[1]) << 8
                          | hex_value(s[2]) << 4 | hex_value(s[3]));
}

/* A string's decoded text. ptr points into the document (no escapes) or into
   Walker.scratch (valid until the next string with escapes is decoded). */
typedef struct {
    const char *ptr;
    Py_ssize_t len;
    int escaped;
} Str;

/* Decode the escaped string body src[start:stop) into scratch. The lexer has
   checked the escapes' syntax, the UTF-8 and the control characters; what is
   left to check here is the surrogates: a high one must be followed by a low
   one (the pair becomes one character), a lone one declines. */
static int
decode_escaped(Walker *w, Py_ssize_t start, Py_ssize_t stop)
{
    const unsigned char *s = w->src;
    w->scratch.len = 0;
    if (buf_reserve(&w->scratch, stop - start) < 0) {  /* decoding never grows */
        return FW_ERROR;
    }
    unsigned char *o = (unsigned char *)w->scratch.data;
    Py_ssize_t i = start;
    while (i < stop) {
        const unsigned char *slash = memchr(s + i, '\\', (size_t)(stop - i));
        Py_ssize_t run = (slash != NULL ? (Py_ssize_t)(slash - s) : stop) - i;
        memcpy(o, s + i, (size_t)run);  /* the text up to the next escape */
        o += run;
        i += run;
        if (i == stop) {
            break;
        }
        unsigned char e = s[i + 1];
        i += 2;
        switch (e) {
        case '"': *o++ = '"'; continue;
        case '\\': *o++ = '\\'; continue;
        case '/': *o++ = '/'; continue;
        case 'b': *o++ = '\b'; continue;
        case 'f': *o++ = '\f'; continue;
        case 'n': *o++ = '\n'; continue;
        case 'r': *o++ = '\r'; continue;
        case 't': *o++ = '\t'; continue;
        default: break;  /* 'u': the only other escape the lexer lets through */
        }
        unsigned int cp = hex4(s + i);
        i += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return FW_DECLINE;  /* a lone low surrogate */
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (stop - i < 6 || s[i] != '\\' || s[i + 1] != 'u') {
                return FW_DECLINE;  /* a high surrogate with no escape after it */
            }
            unsigned int low = hex4(s + i + 2);
            if (low < 0xDC00 || low > 0xDFFF) {
                return FW_DECLINE;
            }
            i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        if (cp < 0x80) {
            *o++ = (unsigned char)cp;
        }
        else if (cp < 0x800) {
            *o++ = (unsigned char)(0xC0 | cp >> 6);
            *o++ = (unsigned char)(0x80 | (cp & 0x3F));
        }
        else if (cp < 0x10000) {
            *o++ = (unsigned char)(0xE0 | cp >> 12);
            *o++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
            *o++ = (unsigned char)(0x80 | (cp & 0x3F));
        }
        else {
            *o++ = (unsigned char)(0xF0 | cp >> 18);
            *o++ = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
            *o++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
            *o++ = (unsigned char)(0x80 | (cp & 0x3F));
        }
    }
    w->scratch.len = (Py_ssize_t)(o - (unsigned char *)w->scratch.data);
    return FW_OK;
}

/* Read the string that starts at pos (a '"') and leave pos after it. */
static int
read_string(Walker *w, Str *str)
{
    const unsigned char *s = w->src;
    Py_ssize_t end = w->end;
    Py_ssize_t start = w->pos + 1;
    Py_ssize_t i = start;
    int escaped = 0;

    for (;;) {
        /* 8 plain bytes at a time: none >= 0x80, below 0x20, '"' or '\\' */
        while (end - i >= 8) {
            uint64_t v = load8(s + i);
            uint64_t hit = (v & HIGHS) | has_less(v, 0x20) | has_zero(v ^ (ONES * '"'))
                           | has_zero(v ^ (ONES * '\\'));
            if (hit) {
                i += FIRST_HIT(hit);
                break;
            }
            i += 8;
        }
        while (i < end && PLAIN[s[i]]) {
            i++;
        }
        if (i >= end) {
            return FW_DECLINE;  /* unterminated */
        }
        unsigned char c = s[i];
        if (c == '"') {
            break;
        }
        if (c == '\\') {
            escaped = 1;
            if (i + 1 >= end) {
                return FW_DECLINE;
            }
            switch (s[i + 1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                i += 2;
                continue;
            case 'u':
                if (end - i < 6 || hex_value(s[i + 2]) < 0 || hex_value(s[i + 3]) < 0
                    || hex_value(s[i + 4]) < 0 || hex_value(s[i + 5]) < 0) {
                    return FW_DECLINE;
                }
                i += 6;
                continue;
            default:
                return FW_DECLINE;
            }
        }
        if (c < 0x20) {
            return FW_DECLINE;  /* a raw control character */
        }
        Py_ssize_t n = utf8_sequence(s + i, end - i);
        if (n == 0) {
            return FW_DECLINE;  /* not UTF-8 */
        }
        i += n;
    }
    w->pos = i + 1;
    str->escaped = escaped;
    if (!escaped) {
        str->ptr = (const char *)s + start;
        str->len = i - start;
        return FW_OK;
    }
    int rc = decode_escaped(w, start, i);
    str->ptr = w->scratch.data;
    str->len = w->scratch.len;
    return rc;
}

/* Write decoded UTF-8 text as a JSON string, escaped as orjson escapes it. */
static int
emit_escaped(Walker *w, const char *text, Py_ssize_t n)
{
    const unsigned char *p = (const unsigned char *)text;
    Py_ssize_t size = 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        size += ESCAPED_LEN[p[i]];
    }
    if (buf_reserve(&w->out, size) < 0) {
        return FW_ERROR;
    }
    char *o = w->out.data + w->out.len;
    *o++ = '"';
    if (size == n + 2) {
        memcpy(o, p, (size_t)n);
        o += n;
    }
    else {
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned char c = p[i];
            if (ESCAPED_LEN[c] == 1) {
                *o++ = (char)c;
                continue;
            }
            *o++ = '\\';
            switch (c) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '\b': *o++ = 'b'; break;
            case '\t': *o++ = 't'; break;
            case '\n': *o++ = 'n'; break;
            case '\f': *o++ = 'f'; break;
            case '\r': *o++ = 'r'; break;
            default:
                *o++ = 'u';
                *o++ = '0';
                *o++ = '0';
                *o++ = "0123456789abcdef"[c >> 4];
                *o++ = "0123456789abcdef"[c & 0xF];
            }
        }
    }
    *o++ = '"';
    w->out.len = o - w->out.data;
    return FW_OK;
}

/* Write a string read by read_string. Without escapes its bytes need none. */
static inline int
emit_string(Walker *w, const Str *str)
{
    if (str->escaped) {
        return emit_escaped(w, str->ptr, str->len);
    }
    if (buf_reserve(&w->out, str->len + 2) < 0) {
        return FW_ERROR;
    }
    char *o = w->out.data + w->out.len;
    o[0] = '"';
    memcpy(o + 1, str->ptr, (size_t)str->len);
    o[str->len + 1] = '"';
    w->out.len += str->len + 2;
    return FW_OK;
}

static int
copy_string(Walker *w)
{
    Str str;
    int rc = read_string(w, &str);
    return rc == FW_OK && !w->quiet ? emit_string(w, &str) : rc;
}


/* -- numbers and literals ---------------------------------------------------- */

/* Read the number at pos if it matches the JSON grammar
   -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
   and leave pos after it; *is_float says whether it has a fraction or an exponent. */
static int
scan_number(Walker *w, int *is_float)
{
    const unsigned char *s = w->src;
    Py_ssize_t end = w->end;
    Py_ssize_t i = w->pos;

#define DIGIT(k) ((k) < end && s[k] >= '0' && s[k] <= '9')
    if (i < end && s[i] == '-') {
        i++;
    }
    if (i < end && s[i] == '0') {
        i++;
    }
    else if (DIGIT(i)) {
        while (DIGIT(i)) {
            i++;
        }
    }
    else {
        return FW_DECLINE;
    }
    *is_float = 0;
    if (i < end && s[i] == '.') {
        *is_float = 1;
        i++;
        if (!DIGIT(i)) {
            return FW_DECLINE;
        }
        while (DIGIT(i)) {
            i++;
        }
    }
    if (i < end && (s[i] == 'e' || s[i] == 'E')) {
        *is_float = 1;
        i++;
        if (i < end && (s[i] == '+' || s[i] == '-')) {
            i++;
        }
        if (!DIGIT(i)) {
            return FW_DECLINE;
        }
        while (DIGIT(i)) {
            i++;
        }
    }
#undef DIGIT
    /* "01" or "1x" stop here; the caller then finds no separator and declines */
    w->pos = i;
    return FW_OK;
}

/* A number is copied as written (parse() keeps every literal: 1.10, 1e3, -0,
   integers of any size). */
static int
copy_number(Walker *w)
{
    Py_ssize_t start = w->pos;
    int is_float;
    int rc = scan_number(w, &is_float);
    if (rc != FW_OK) {
        return rc;
    }
    return OUT_PUT(w, (const char *)w->src + start, w->pos - start) < 0 ? FW_ERROR : FW_OK;
}

static int
copy_literal(Walker *w, const char *word, Py_ssize_t n)
{
    if (w->end - w->pos < n || memcmp(w->src + w->pos, word, (size_t)n) != 0) {
        return FW_DECLINE;  /* NaN, Infinity, tru, ... */
    }
    w->pos += n;
    return OUT_PUT(w, word, n) < 0 ? FW_ERROR : FW_OK;
}


/* -- keys -------------------------------------------------------------------- */

/* What a member's key means to the walk (the key sets of catalog.py). */
typedef enum {
    K_OTHER = 0,
    K_DESCRIPTION,   /* "description" */
    K_ANNOTATION,    /* ANNOTATION_KEYS */
    K_NAME_MAP,      /* NAME_MAPS */
    K_ITEMS,         /* "items": in both ONE_SCHEMA and SCHEMA_LIST */
    K_SCHEMA_LIST,   /* SCHEMA_LIST but "items" */
    K_ONE_SCHEMA,    /* ONE_SCHEMA but "items" */
    K_TOOL_SCHEMA,   /* SCHEMA_KEYS: a tool's schemas */
    K_FUNCTION,      /* "function": the tool inside an OpenAI tools entry */
} KeyKind;

typedef struct {
    const char *name;
    Py_ssize_t len;
    KeyKind kind;
} KnownKey;

#define KNOWN(name, kind) {name, sizeof(name) - 1, kind}
static const KnownKey KNOWN_KEYS[] = {
    KNOWN("description", K_DESCRIPTION),
    KNOWN("title", K_ANNOTATION),
    KNOWN("examples", K_ANNOTATION),
    KNOWN("example", K_ANNOTATION),
    KNOWN("$comment", K_ANNOTATION),
    KNOWN("$schema", K_ANNOTATION),
    KNOWN("properties", K_NAME_MAP),
    KNOWN("patternProperties", K_NAME_MAP),
    KNOWN("$defs", K_NAME_MAP),
    KNOWN("definitions", K_NAME_MAP),
    KNOWN("dependentSchemas", K_NAME_MAP),
    KNOWN("dependencies", K_NAME_MAP),
    KNOWN("items", K_ITEMS),
    KNOWN("anyOf", K_SCHEMA_LIST),
    KNOWN("oneOf", K_SCHEMA_LIST),
    KNOWN("allOf", K_SCHEMA_LIST),
    KNOWN("prefixItems", K_SCHEMA_LIST),
    KNOWN("additionalItems", K_ONE_SCHEMA),
    KNOWN("additionalProperties", K_ONE_SCHEMA),
    KNOWN("contains", K_ONE_SCHEMA),
    KNOWN("unevaluatedItems", K_ONE_SCHEMA),
    KNOWN("unevaluatedProperties", K_ONE_SCHEMA),
    KNOWN("propertyNames", K_ONE_SCHEMA),
    KNOWN("not", K_ONE_SCHEMA),
    KNOWN("if", K_ONE_SCHEMA),
    KNOWN("then", K_ONE_SCHEMA),
    KNOWN("else", K_ONE_SCHEMA),
    KNOWN("contentSchema", K_ONE_SCHEMA),
    KNOWN("inputSchema", K_TOOL_SCHEMA),
    KNOWN("input_schema", K_TOOL_SCHEMA),
    KNOWN("parameters", K_TOOL_SCHEMA),
    KNOWN("outputSchema", K_TOOL_SCHEMA),
    KNOWN("output_schema", K_TOOL_SCHEMA),
    KNOWN("function", K_FUNCTION),
};
#undef KNOWN

#define N_KNOWN (sizeof(KNOWN_KEYS) / sizeof(KNOWN_KEYS[0]))
#define KNOWN_MAX_LEN 21  /* "unevaluatedProperties" */

/* KNOWN_KEYS indexes by length: a key is compared with those of its length only. */
static unsigned char KNOWN_BY_LEN[KNOWN_MAX_LEN + 1][N_KNOWN + 1];

static void
init_known_keys(void)
{
    memset(KNOWN_BY_LEN, 0, sizeof(KNOWN_BY_LEN));
    for (size_t i = 0; i < N_KNOWN; i++) {
        unsigned char *row = KNOWN_BY_LEN[KNOWN_KEYS[i].len];
        row[++row[0]] = (unsigned char)i;  /* row[0]: how many */
    }
}

static inline KeyKind
classify_key(const char *key, Py_ssize_t len)
{
    if (len > KNOWN_MAX_LEN) {
        return K_OTHER;
    }
    const unsigned char *row = KNOWN_BY_LEN[len];
    for (int i = 1; i <= row[0]; i++) {
        const KnownKey *k = &KNOWN_KEYS[row[i]];
        if (k->name[0] == key[0] && memcmp(k->name, key, (size_t)len) == 0) {
            return k->kind;
        }
    }
    return K_OTHER;
}

/* Remember a decoded key of the innermost open object. */
static int
push_key(Walker *w, const Str *key)
{
    if (w->nkeys == w->keys_cap) {
        Py_ssize_t cap = w->keys_cap ? w->keys_cap * 2 : 64;
        KeyRef *keys = PyMem_Realloc(w->keys, (size_t)cap * sizeof(KeyRef));
        if (keys == NULL) {
            PyErr_NoMemory();
            return FW_ERROR;
        }
        w->keys = keys;
        w->keys_cap = cap;
    }
    w->keys[w->nkeys].off = w->keybytes.len;
    w->keys[w->nkeys].len = key->len;
    w->nkeys++;
    return buf_put(&w->keybytes, key->ptr, key->len) < 0 ? FW_ERROR : FW_OK;
}

static inline int
same_key(const char *base, const KeyRef *a, const KeyRef *b)
{
    return a->len == b->len && memcmp(base + a->off, base + b->off, (size_t)a->len) == 0;
}

/* FW_OK if the keys from `first` on are distinct, else FW_DECLINE: parse()
   rejects duplicates, compared after decoding ("a" and "\u0061" are one key).
   Small objects are compared pairwise, big ones through a hash table so a
   100k-key object stays linear. */
static int
check_unique(Walker *w, Py_ssize_t first)
{
    const KeyRef *keys = w->keys + first;
    Py_ssize_t n = w->nkeys - first;
    const char *base = w->keybytes.data;

    if (n <= SMALL_OBJECT) {
        for (Py_ssize_t i = 1; i < n; i++) {
            for (Py_ssize_t j = 0; j < i; j++) {
                if (same_key(base, &keys[i], &keys[j])) {
                    return FW_DECLINE;
                }
            }
        }
        return FW_OK;
    }
    size_t size = 64;
    while (size < (size_t)n * 2) {
        size *= 2;
    }
    Py_ssize_t *slots = PyMem_Malloc(size * sizeof(Py_ssize_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return FW_ERROR;
    }
    for (size_t i = 0; i < size; i++) {
        slots[i] = -1;
    }
    int rc = FW_OK;
    for (Py_ssize_t i = 0; i < n && rc == FW_OK; i++) {
        /* CPython's own (randomized) bytes hash: crafted keys cannot all collide */
        size_t h = (size_t)fw_hash_bytes(base + keys[i].off, keys[i].len);
        for (;;) {
            h &= size - 1;
            if (slots[h] < 0) {
                slots[h] = i;
                break;
            }
            if (same_key(base, &keys[i], &keys[slots[h]])) {
                rc = FW_DECLINE;
                break;
            }
            h++;
        }
    }
    PyMem_Free(slots);
    return rc;
}


/* -- containers -------------------------------------------------------------- */

/* Reads one member's value (pos at its first byte) and writes it to the output.
   `key` is the decoded key; it stays valid only until the value is read (reading
   it may move the key stack), so look at it first. Returns FW_DROP to have the
   member left out. */
typedef int (*member_fn)(Walker *w, const char *key, Py_ssize_t key_len,
                         void *ctx);

/* Reads the element `index` of an array (pos at its first byte). */
typedef int (*element_fn)(Walker *w, Py_ssize_t index, void *ctx);

static int copy_value(Walker *w);
static int copy_member(Walker *w, const char *key, Py_ssize_t key_len,
                       void *ctx);
static int skim_member(Walker *w, const char *key, Py_ssize_t key_len,
                       void *ctx);

/* Read the object at pos (a '{'), calling on_member for each member's value. */
static int
walk_object(Walker *w, member_fn on_member, void *ctx)
{
    if (++w->nesting > MAX_NESTING) {
        return FW_DECLINE;
    }
    Py_ssize_t first_key = w->nkeys;
    Py_ssize_t first_byte = w->keybytes.len;
    Py_ssize_t kept = 0;
    int rc;

    w->pos++;
    if (OUT_BYTE(w, '{') < 0) {
        return FW_ERROR;
    }
    skip_ws(w);
    if (peek(w) == '}') {
        w->pos++;
    }
    else {
        for (;;) {
            if (peek(w) != '"') {
                return FW_DECLINE;
            }
            Py_ssize_t mark = w->out.len;  /* where a dropped member is cut off */
            if (kept && OUT_BYTE(w, ',') < 0) {
                return FW_ERROR;
            }
            Str key;
            if ((rc = read_string(w, &key)) != FW_OK
                || (!w->quiet && (rc = emit_string(w, &key)) != FW_OK)
                || (rc = push_key(w, &key)) != FW_OK) {
                return rc;
            }
            skip_ws(w);
            if (peek(w) != ':') {
                return FW_DECLINE;
            }
            w->pos++;
            if (OUT_BYTE(w, ':') < 0) {
                return FW_ERROR;
            }
            skip_ws(w);
            const KeyRef *ref = &w->keys[w->nkeys - 1];
            const char *name = w->keybytes.data + ref->off;
            rc = on_member(w, name, ref->len, ctx);  /* what the key means: its reader asks */
            if (rc == FW_DROP) {
                w->out.len = mark;
            }
            else if (rc != FW_OK) {
                return rc;
            }
            else {
                kept++;
            }
            skip_ws(w);
            unsigned char c = peek(w);
            w->pos++;
            if (c == '}') {
                break;
            }
            if (c != ',') {
                return FW_DECLINE;
            }
            skip_ws(w);
        }
    }
    if ((rc = check_unique(w, first_key)) != FW_OK) {
        return rc;
    }
    w->nkeys = first_key;
    w->keybytes.len = first_byte;
    w->nesting--;
    return OUT_BYTE(w, '}') < 0 ? FW_ERROR : FW_OK;
}

/* Read the array at pos (a '['), calling on_element for each element; *count
   gets the number of elements. */
static int
walk_array(Walker *w, element_fn on_element, void *ctx, Py_ssize_t *count)
{
    if (++w->nesting > MAX_NESTING) {
        return FW_DECLINE;
    }
    Py_ssize_t n = 0;
    int rc;

    w->pos++;
    if (OUT_BYTE(w, '[') < 0) {
        return FW_ERROR;
    }
    skip_ws(w);
    if (peek(w) == ']') {
        w->pos++;
    }
    else {
        for (;;) {
            if (n && OUT_BYTE(w, ',') < 0) {
                return FW_ERROR;
            }
            if ((rc = on_element(w, n, ctx)) != FW_OK) {
                return rc;
            }
            n++;
            skip_ws(w);
            unsigned char c = peek(w);
            w->pos++;
            if (c == ']') {
                break;
            }
            if (c != ',') {
                return FW_DECLINE;
            }
            skip_ws(w);
        }
    }
    if (count != NULL) {
        *count = n;
    }
    w->nesting--;
    return OUT_BYTE(w, ']') < 0 ? FW_ERROR : FW_OK;
}


/* -- values copied as they are (re-serialized, never walked) ---------------- */

static int
copy_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    return copy_value(w);
}

static int
copy_element(Walker *w, Py_ssize_t index, void *ctx)
{
    return copy_value(w);
}

/* Read any JSON value at pos (white space already skipped) and write it. */
static int
copy_value(Walker *w)
{
    switch (peek(w)) {
    case '{':
        return walk_object(w, copy_member, NULL);
    case '[':
        return walk_array(w, copy_element, NULL, NULL);
    case '"':
        return copy_string(w);
    case 't':
        return copy_literal(w, "true", 4);
    case 'f':
        return copy_literal(w, "false", 5);
    case 'n':
        return copy_literal(w, "null", 4);
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        return copy_number(w);
    default:
        return FW_DECLINE;
    }
}


/* -- descriptions ------------------------------------------------------------ */

/* describe.reduce's own first test, where C can decide it cheaply: printable
   ASCII of at most short_bytes, with no "  " and no space at either end, is
   already folded and short, so reduce() returns it unchanged. */
static int
is_short_and_folded(const char *text, Py_ssize_t n, Py_ssize_t short_bytes)
{
    if (n > short_bytes) {
        return 0;
    }
    if (n > 0 && (text[0] == ' ' || text[n - 1] == ' ')) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c > 0x7e || (c == ' ' && text[i + 1] == ' ')) {
            return 0;  /* text[n - 1] is not a space, so text[i + 1] is in range */
        }
    }
    return 1;
}

/* A failed reducer call: an ordinary exception means "let Python decide" (it
   will raise it again there); KeyboardInterrupt and the like propagate. */
static int
reducer_failed(void)
{
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return FW_DECLINE;
    }
    return FW_ERROR;
}

/* Read the description string at pos, write it reduced (_Walk.description). */
static int
reduce_description(Walker *w)
{
    Str str;
    int rc = read_string(w, &str);
    if (rc != FW_OK) {
        return rc;
    }
    if (is_short_and_folded(str.ptr, str.len, w->short_bytes)) {
        return emit_string(w, &str);
    }
    PyObject *text = PyUnicode_DecodeUTF8(str.ptr, str.len, "strict");
    if (text == NULL) {
        return reducer_failed();
    }
    PyObject *result = PyObject_CallOneArg(w->reducer, text);
    if (result == NULL) {
        Py_DECREF(text);
        return reducer_failed();
    }
    rc = FW_DECLINE;  /* unless the result is a str that orjson can write */
    if (PyUnicode_CheckExact(result)) {
        Py_ssize_t n;
        const char *utf8 = PyUnicode_AsUTF8AndSize(result, &n);
        if (utf8 == NULL) {
            rc = reducer_failed();  /* a lone surrogate: orjson would refuse it */
        }
        else {
            /* str.ptr is still valid: only this walker writes its scratch */
            if (n != str.len || memcmp(utf8, str.ptr, (size_t)n) != 0) {
                w->reduced++;
            }
            rc = emit_escaped(w, utf8, n);
        }
    }
    Py_DECREF(result);
    Py_DECREF(text);
    return rc;
}


/* -- schemas (catalog._Walk.schema) ------------------------------------------ */

static int schema_member(Walker *w, const char *key, Py_ssize_t key_len,
                         void *ctx);

/* A value in schema position at schema depth `depth`: an object is walked,
   anything else is data. A value at schema depth d sits inside at least d + 1
   containers, so MAX_NESTING already keeps depth within catalog.MAX_DEPTH; the
   check mirrors _Walk.schema's own. */
static int
schema_value(Walker *w, int depth)
{
    if (depth > MAX_NESTING) {
        return FW_DECLINE;  /* _Walk.schema's Passthrough: Python gives the reason */
    }
    if (peek(w) == '{') {
        return walk_object(w, schema_member, &depth);
    }
    return copy_value(w);
}

/* A member of a name map: the name is data, the value a schema. */
static int
name_map_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    return schema_value(w, *(int *)ctx);
}

/* An element of a schema list. */
static int
schema_element(Walker *w, Py_ssize_t index, void *ctx)
{
    return schema_value(w, *(int *)ctx);
}

static int
schema_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    int sub = *(int *)ctx + 1;
    unsigned char c = peek(w);
    int rc;

    switch (classify_key(key, key_len)) {
    case K_ANNOTATION:
        /* kept or dropped, an annotation's value is data: never walked */
        rc = copy_value(w);
        if (rc == FW_OK && w->drop_annotations) {
            w->dropped++;
            return FW_DROP;
        }
        return rc;
    case K_DESCRIPTION:
        return c == '"' ? reduce_description(w) : copy_value(w);
    case K_NAME_MAP:
        return c == '{' ? walk_object(w, name_map_member, &sub) : copy_value(w);
    case K_ITEMS:
        if (c == '{') {
            return schema_value(w, sub);
        }
        return c == '[' ? walk_array(w, schema_element, &sub, NULL) : copy_value(w);
    case K_SCHEMA_LIST:
        return c == '[' ? walk_array(w, schema_element, &sub, NULL) : copy_value(w);
    case K_ONE_SCHEMA:
        return c == '{' ? schema_value(w, sub) : copy_value(w);
    default:
        return copy_value(w);
    }
}


/* -- tools (catalog._Walk.tool) ---------------------------------------------- */

static int
tool_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    KeyKind kind = classify_key(key, key_len);
    if (kind == K_DESCRIPTION && peek(w) == '"') {
        return reduce_description(w);
    }
    if (kind == K_TOOL_SCHEMA) {
        return schema_value(w, 0);
    }
    return copy_value(w);
}

/* The plan says a tool is here: it must be an object. With w->tool_spans, its
   (start, end) in the input and in the output are appended there (the index's
   per-tool records and definitions: no second walk of either). */
static int
tool_value(Walker *w)
{
    if (peek(w) != '{') {
        return FW_DECLINE;
    }
    Py_ssize_t in_start = w->pos, out_start = w->out.len;
    int rc = walk_object(w, tool_member, NULL);
    if (rc != FW_OK || w->tool_spans == NULL) {
        return rc;
    }
    PyObject *span = Py_BuildValue("(nnnn)", in_start, w->pos, out_start, w->out.len);
    if (span == NULL) {
        return FW_ERROR;
    }
    rc = PyList_Append(w->tool_spans, span) < 0 ? FW_ERROR : FW_OK;
    Py_DECREF(span);
    return rc;
}

/* {"type": "function", "function": TOOL, ...}: the tool is the "function" member. */
static int
wrapper_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    if (classify_key(key, key_len) == K_FUNCTION) {
        *(int *)ctx = 1;
        return tool_value(w);
    }
    return copy_value(w);
}

static int
wrapper_value(Walker *w)
{
    int found = 0;
    if (peek(w) != '{') {
        return FW_DECLINE;
    }
    int rc = walk_object(w, wrapper_member, &found);
    return rc == FW_OK && !found ? FW_DECLINE : rc;
}


/* -- the plan: where the tools are ------------------------------------------- */

enum { KIND_DATA = 0, KIND_TOOL = 1, KIND_WRAPPED = 2 };

typedef struct {
    Py_ssize_t depth;             /* len(path) */
    const char **keys;            /* path, UTF-8 */
    Py_ssize_t *key_lens;
    int single;                   /* kinds was an int: one tool, at the end of the path */
    int single_kind;
    const unsigned char *kinds;   /* else one kind per element of the array there */
    Py_ssize_t nkinds;
} Plan;

typedef struct {
    const Plan *plan;
    Py_ssize_t level;
    int found;
} PathStep;

static int
tool_element(Walker *w, Py_ssize_t index, void *ctx)
{
    const Plan *plan = ctx;
    if (index >= plan->nkinds) {
        return FW_DECLINE;  /* the plan has fewer elements */
    }
    switch (plan->kinds[index]) {
    case KIND_DATA:
        return copy_value(w);
    case KIND_TOOL:
        return tool_value(w);
    case KIND_WRAPPED:
        return wrapper_value(w);
    default:
        return FW_DECLINE;
    }
}

static int path_member(Walker *w, const char *key, Py_ssize_t key_len,
                       void *ctx);

/* The value at path[:level]. */
static int
path_value(Walker *w, const Plan *plan, Py_ssize_t level)
{
    if (level == plan->depth) {
        if (plan->single) {
            return plan->single_kind == KIND_TOOL ? tool_value(w) : wrapper_value(w);
        }
        if (peek(w) != '[') {
            return FW_DECLINE;
        }
        Py_ssize_t count = 0;
        int rc = walk_array(w, tool_element, (void *)plan, &count);
        return rc == FW_OK && count != plan->nkinds ? FW_DECLINE : rc;
    }
    if (peek(w) != '{') {
        return FW_DECLINE;
    }
    PathStep step = {plan, level, 0};
    int rc = walk_object(w, path_member, &step);
    return rc == FW_OK && !step.found ? FW_DECLINE : rc;
}

static int
path_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    PathStep *step = ctx;
    const Plan *plan = step->plan;
    if (key_len == plan->key_lens[step->level]
        && memcmp(key, plan->keys[step->level], (size_t)key_len) == 0) {
        step->found = 1;  /* only once: a duplicate key declines the whole object */
        return path_value(w, plan, step->level + 1);
    }
    return copy_value(w);
}


/* -- skim: the top levels of a document as Python objects ------------------- */

/* catalog._fast_compress needs the plan (where the tools are) before rewrite()
   runs, and locate_tools looks only at the top few levels of a catalog. skim()
   reads the document with the readers above, as strictly as rewrite() does (it
   refuses exactly the documents rewrite() refuses whatever the plan), and builds
   Python objects down to a given depth only: a container deeper than that is
   read, checked and skipped (Walker.quiet: nothing is written), and comes back
   as an empty dict or list. The bulk of a catalog, its schemas, is never built. */

#define KEY_CACHE 64        /* recent ASCII keys, per call: "name", "type", ... */
#define KEY_CACHE_MAX_LEN 32

typedef struct {
    PyObject *container;   /* the dict or list being filled */
    int depth;             /* its depth: the root is 0 */
    int max_depth;         /* containers deeper than this come back empty */
    PyObject **keys;       /* the call's key cache: KEY_CACHE str or NULL */
} SkimLevel;

/* The key as a str: from the cache when it holds it (a str caches its hash,
   so the dict does not hash it again), else decoded. A new reference. */
static PyObject *
skim_key(PyObject **cache, const char *key, Py_ssize_t len)
{
    if (len > KEY_CACHE_MAX_LEN) {
        return PyUnicode_DecodeUTF8(key, len, NULL);
    }
    /* a slot from the length and three bytes: a miss only costs a decode */
    const unsigned char *k = (const unsigned char *)key;
    size_t h = len == 0 ? 0 : (size_t)len * 31 + k[0] * 7u + k[len / 2] * 3u + k[len - 1];
    PyObject **slot = &cache[h % KEY_CACHE];
    PyObject *hit = *slot;
    if (hit != NULL && PyUnicode_GET_LENGTH(hit) == len
        && memcmp(PyUnicode_DATA(hit), key, (size_t)len) == 0) {
        return Py_NewRef(hit);  /* cached keys are ASCII: length == bytes */
    }
    PyObject *name = PyUnicode_DecodeUTF8(key, len, NULL);
    if (name != NULL && PyUnicode_IS_ASCII(name)) {
        Py_XSETREF(*slot, Py_NewRef(name));
    }
    return name;
}

static int skim_value(Walker *w, int depth, int max_depth, PyObject **keys, PyObject **value);

static int
skim_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    SkimLevel *level = ctx;
    /* decoded before the value is read (that may move the key bytes); the
       lexer has checked the UTF-8 and refused lone surrogates */
    PyObject *name = skim_key(level->keys, key, key_len);
    if (name == NULL) {
        return FW_ERROR;
    }
    PyObject *value;
    int rc = skim_value(w, level->depth + 1, level->max_depth, level->keys, &value);
    if (rc == FW_OK) {
        /* a duplicate key replaces the value here, and walk_object then declines */
        if (PyDict_SetItem(level->container, name, value) < 0) {
            rc = FW_ERROR;
        }
        Py_DECREF(value);
    }
    Py_DECREF(name);
    return rc;
}

static int
skim_element(Walker *w, Py_ssize_t index, void *ctx)
{
    SkimLevel *level = ctx;
    PyObject *value;
    int rc = skim_value(w, level->depth + 1, level->max_depth, level->keys, &value);
    if (rc == FW_OK) {
        if (PyList_Append(level->container, value) < 0) {
            rc = FW_ERROR;
        }
        Py_DECREF(value);
    }
    return rc;
}

/* The number literal s[:n] (scan_number has checked it) as json.loads gives
   it: an int, or a float (1e400 is inf). An integer too long for int()
   (sys.get_int_max_str_digits, 4300 digits) comes back as None: json.loads
   refuses it, and locate_tools never looks at a number's value anyway. */
static int
number_object(const char *s, Py_ssize_t n, int is_float, PyObject **value)
{
    if (!is_float && n <= 18) {  /* up to 18 digits fit in 63 bits */
        long long v = 0;
        Py_ssize_t i = s[0] == '-';
        for (; i < n; i++) {
            v = v * 10 + (s[i] - '0');
        }
        *value = PyLong_FromLongLong(s[0] == '-' ? -v : v);
        return *value != NULL ? FW_OK : FW_ERROR;
    }
    char small[64];
    char *text = n < (Py_ssize_t)sizeof(small) ? small : PyMem_Malloc((size_t)n + 1);
    if (text == NULL) {
        PyErr_NoMemory();
        return FW_ERROR;
    }
    memcpy(text, s, (size_t)n);
    text[n] = '\0';
    if (is_float) {
        double d = PyOS_string_to_double(text, NULL, NULL);  /* overflow: +-inf, as float() */
        *value = d == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(d);
    }
    else {
        *value = PyLong_FromString(text, NULL, 10);
        if (*value == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();  /* over the int digit limit */
            *value = Py_NewRef(Py_None);
        }
    }
    if (text != small) {
        PyMem_Free(text);
    }
    return *value != NULL ? FW_OK : FW_ERROR;
}

/* Read the value at pos (white space skipped), at depth `depth`, into *value
   (a new reference) when FW_OK. */
static int
skim_value(Walker *w, int depth, int max_depth, PyObject **keys, PyObject **value)
{
    unsigned char c = peek(w);
    int rc;

    if (c == '{' || c == '[') {
        PyObject *container = c == '{' ? PyDict_New() : PyList_New(0);
        if (container == NULL) {
            return FW_ERROR;
        }
        if (depth > max_depth) {
            rc = copy_value(w);  /* checked and skipped: it stays empty */
        }
        else {
            SkimLevel level = {container, depth, max_depth, keys};
            rc = c == '{' ? walk_object(w, skim_member, &level)
                          : walk_array(w, skim_element, &level, NULL);
        }
        if (rc != FW_OK) {
            Py_DECREF(container);
            return rc;
        }
        *value = container;
        return FW_OK;
    }
    if (c == '"') {
        Str str;
        if ((rc = read_string(w, &str)) != FW_OK) {
            return rc;
        }
        *value = PyUnicode_DecodeUTF8(str.ptr, str.len, NULL);
        return *value != NULL ? FW_OK : FW_ERROR;
    }
    PyObject *constant = c == 't' ? Py_True : c == 'f' ? Py_False : c == 'n' ? Py_None : NULL;
    if (constant != NULL) {
        if ((rc = copy_literal(w, c == 't' ? "true" : c == 'f' ? "false" : "null",
                               c == 'f' ? 5 : 4)) != FW_OK) {
            return rc;
        }
        *value = Py_NewRef(constant);
        return FW_OK;
    }
    Py_ssize_t start = w->pos;
    int is_float;
    if ((rc = scan_number(w, &is_float)) != FW_OK) {
        return rc;  /* no value starts with c */
    }
    return number_object((const char *)w->src + start, w->pos - start, is_float, value);
}


/* -- spans: where each tool object lies ------------------------------------- */

/* toolspans.tool_spans needs the byte range of every tool the plan names, to
   store each tool's exact bytes on their own. spans() follows the plan as
   rewrite() does, reading quietly (nothing written, everything checked as
   strictly), and collects (start, end) of each tool object: the element
   itself, or the value of its "function" member. */

typedef struct {
    const Plan *plan;
    Py_ssize_t level;
    int found;
    PyObject *spans;            /* list of (start, end) */
} SpanStep;

static int
span_add(PyObject *spans, Py_ssize_t start, Py_ssize_t end)
{
    PyObject *pair = Py_BuildValue("(nn)", start, end);
    if (pair == NULL) {
        return FW_ERROR;
    }
    int rc = PyList_Append(spans, pair);
    Py_DECREF(pair);
    return rc < 0 ? FW_ERROR : FW_OK;
}

static int
span_value(Walker *w, PyObject *spans)
{
    Py_ssize_t start = w->pos;
    int rc = copy_value(w);
    return rc != FW_OK ? rc : span_add(spans, start, w->pos);
}

static int
span_function_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    SpanStep *step = ctx;
    if (key_len == 8 && memcmp(key, "function", 8) == 0) {
        step->found = 1;  /* once: a duplicate key declines the whole object */
        return span_value(w, step->spans);
    }
    return copy_value(w);
}

static int
span_tool(Walker *w, int kind, PyObject *spans)
{
    if (kind == KIND_TOOL) {
        return peek(w) == '{' ? span_value(w, spans) : FW_DECLINE;
    }
    if (kind != KIND_WRAPPED || peek(w) != '{') {
        return FW_DECLINE;
    }
    SpanStep step = {NULL, 0, 0, spans};
    int rc = walk_object(w, span_function_member, &step);
    return rc == FW_OK && !step.found ? FW_DECLINE : rc;
}

static int
span_element(Walker *w, Py_ssize_t index, void *ctx)
{
    SpanStep *step = ctx;
    if (index >= step->plan->nkinds) {
        return FW_DECLINE;  /* the plan has fewer elements */
    }
    int kind = step->plan->kinds[index];
    return kind == KIND_DATA ? copy_value(w) : span_tool(w, kind, step->spans);
}

static int span_path_value(Walker *w, const Plan *plan, Py_ssize_t level, PyObject *spans);

static int
span_path_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    SpanStep *step = ctx;
    const Plan *plan = step->plan;
    if (key_len == plan->key_lens[step->level]
        && memcmp(key, plan->keys[step->level], (size_t)key_len) == 0) {
        step->found = 1;
        return span_path_value(w, plan, step->level + 1, step->spans);
    }
    return copy_value(w);
}

/* The value at path[:level]: its tools' spans appended to `spans`. */
static int
span_path_value(Walker *w, const Plan *plan, Py_ssize_t level, PyObject *spans)
{
    SpanStep step = {plan, level, 0, spans};
    if (level == plan->depth) {
        if (plan->single) {
            return span_tool(w, plan->single_kind, spans);
        }
        if (peek(w) != '[') {
            return FW_DECLINE;
        }
        Py_ssize_t count = 0;
        int rc = walk_array(w, span_element, &step, &count);
        return rc == FW_OK && count != plan->nkinds ? FW_DECLINE : rc;
    }
    if (peek(w) != '{') {
        return FW_DECLINE;
    }
    int rc = walk_object(w, span_path_member, &step);
    return rc == FW_OK && !step.found ? FW_DECLINE : rc;
}


/* -- search text: toolsearch.search_fields over a parsed tool ------------------ */

/* toolsearch.search_fields defines the index's search text of a tool object;
   search_fields() below builds the same three strings from the same Python
   objects, for the names it can split exactly: printable ASCII (any other
   character, e.g. Unicode white space that Python's \s would match, declines the
   whole tool, and Python builds its text). Python hands in its own key sets
   (catalog.NAME_MAPS, SCHEMA_LIST, ONE_SCHEMA) and the schema keys to read, so
   the two cannot disagree on them. Only exact dicts, lists and str keys are
   walked; anything else declines. */

typedef struct {
    PyObject *name_maps, *schema_list, *one_schema;
    PyObject *out;              /* list of str, joined by " " at the end */
    Buf word;                   /* split_name's output */
} TextCtx;

#define TX_LOWER(c) ((c) >= 'a' && (c) <= 'z')
#define TX_UPPER(c) ((c) >= 'A' && (c) <= 'Z')
#define TX_DIGIT(c) ((c) >= '0' && (c) <= '9')

static int
tx_separator(unsigned char c)
{
    return c == ' ' || c == '_' || c == '-' || c == '.' || c == ':' || c == '/';
}

/* split_name of the ASCII text s[:n], appended to dst: FW_OK, FW_DECLINE (not
   printable ASCII) or FW_ERROR. Words end at a run of separators and inside a run
   of letters at a camel-case step: lower or digit then upper, or upper then an
   upper that starts a capitalized word ("ABCDef" -> "ABC Def"). */
static int
split_words(Buf *dst, const unsigned char *s, Py_ssize_t n)
{
    if (buf_reserve(dst, n * 2 + 1) < 0) {
        return FW_ERROR;
    }
    Py_ssize_t first = dst->len;
    int in_word = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c < 0x20 || c > 0x7E) {
            return FW_DECLINE;  /* control characters: some are \s to Python */
        }
        if (tx_separator(c)) {
            in_word = 0;
            continue;
        }
        if (in_word && i > 0) {
            unsigned char p = s[i - 1];
            int camel = ((TX_LOWER(p) || TX_DIGIT(p)) && TX_UPPER(c))
                        || (TX_UPPER(p) && TX_UPPER(c) && i + 1 < n && TX_LOWER(s[i + 1]));
            if (camel) {
                in_word = 0;
            }
        }
        if (!in_word && dst->len > first) {
            dst->data[dst->len++] = ' ';
        }
        dst->data[dst->len++] = (char)c;
        in_word = 1;
    }
    return FW_OK;
}

/* split_name(name) as a new str, or NULL with FW_DECLINE in *rc (not printable
   ASCII) or FW_ERROR. */
static PyObject *
tx_split_name(TextCtx *cx, PyObject *name, int *rc)
{
    if (!PyUnicode_IS_ASCII(name)) {
        *rc = FW_DECLINE;
        return NULL;
    }
    cx->word.len = 0;
    *rc = split_words(&cx->word, PyUnicode_1BYTE_DATA(name), PyUnicode_GET_LENGTH(name));
    if (*rc != FW_OK) {
        return NULL;
    }
    PyObject *words = PyUnicode_FromStringAndSize(cx->word.data, cx->word.len);
    if (words == NULL) {
        *rc = FW_ERROR;
    }
    return words;
}

static int
tx_append(TextCtx *cx, PyObject *text)
{
    return PyList_Append(cx->out, text) < 0 ? FW_ERROR : FW_OK;
}

static int
tx_append_split(TextCtx *cx, PyObject *name)
{
    int rc = FW_OK;
    PyObject *words = tx_split_name(cx, name, &rc);
    if (words == NULL) {
        return rc;
    }
    rc = tx_append(cx, words);
    Py_DECREF(words);
    return rc;
}

static int
tx_has(PyObject *set, PyObject *key)
{
    int found = PySet_Contains(set, key);
    return found < 0 ? FW_ERROR : found;
}

static int tx_schema(TextCtx *cx, PyObject *node, int depth);

static int
tx_enum(TextCtx *cx, PyObject *values)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        if (!(PyUnicode_Check(v) || PyLong_Check(v) || PyFloat_Check(v))) {
            continue;
        }
        PyObject *text = PyObject_Str(v);  /* str(v), as Python: True -> "True" */
        if (text == NULL) {
            return FW_ERROR;
        }
        int rc = tx_append(cx, text);
        Py_DECREF(text);
        if (rc != FW_OK) {
            return rc;
        }
    }
    return FW_OK;
}

static int
tx_name_map(TextCtx *cx, PyObject *map, int depth)
{
    PyObject *name, *sub;
    Py_ssize_t at = 0;
    while (PyDict_Next(map, &at, &name, &sub)) {
        if (!PyUnicode_CheckExact(name)) {
            return FW_DECLINE;
        }
        int rc = tx_append_split(cx, name);
        if (rc == FW_OK) {
            rc = tx_schema(cx, sub, depth + 1);
        }
        if (rc != FW_OK) {
            return rc;
        }
    }
    return FW_OK;
}

static int
tx_member(TextCtx *cx, PyObject *key, PyObject *value, int depth)
{
    if (PyUnicode_CompareWithASCIIString(key, "description") == 0 && PyUnicode_Check(value)) {
        return tx_append(cx, value);
    }
    if (PyUnicode_CompareWithASCIIString(key, "enum") == 0 && PyList_Check(value)) {
        return PyList_CheckExact(value) ? tx_enum(cx, value) : FW_DECLINE;
    }
    int found = tx_has(cx->name_maps, key);
    if (found < 0) {
        return found;
    }
    if (found && PyDict_Check(value)) {
        return PyDict_CheckExact(value) ? tx_name_map(cx, value, depth) : FW_DECLINE;
    }
    found = tx_has(cx->schema_list, key);
    if (found < 0) {
        return found;
    }
    if (found && PyList_Check(value)) {
        if (!PyList_CheckExact(value)) {
            return FW_DECLINE;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++) {
            int rc = tx_schema(cx, PyList_GET_ITEM(value, i), depth + 1);
            if (rc != FW_OK) {
                return rc;
            }
        }
        return FW_OK;
    }
    found = tx_has(cx->one_schema, key);
    if (found < 0) {
        return found;
    }
    return found ? tx_schema(cx, value, depth + 1) : FW_OK;
}

/* _schema_text: parameter names (split), descriptions, enum values, in order. */
static int
tx_schema(TextCtx *cx, PyObject *node, int depth)
{
    if (!PyDict_Check(node) || depth > 64) {
        return FW_OK;
    }
    if (!PyDict_CheckExact(node)) {
        return FW_DECLINE;
    }
    PyObject *key, *value;
    Py_ssize_t at = 0;
    while (PyDict_Next(node, &at, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) {
            return FW_DECLINE;
        }
        int rc = tx_member(cx, key, value, depth);
        if (rc != FW_OK) {
            return rc;
        }
    }
    return FW_OK;
}

PyDoc_STRVAR(search_fields_doc,
"search_fields(tool, schema_keys, name_maps, schema_list, one_schema, /)\n"
"--\n"
"\n"
"(name, description, params): toolsearch.search_fields(tool)'s three strings, or\n"
"None to run the Python path (a name not printable ASCII, a dict or list subclass,\n"
"a key not a str). schema_keys: the keys of the tool whose schemas are read, in order.");

static PyObject *
fastwalk_search_fields(PyObject *module, PyObject *args)
{
    PyObject *tool, *schema_keys;
    TextCtx cx;
    memset(&cx, 0, sizeof(cx));
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!:search_fields", &PyDict_Type, &tool,
                          &PyTuple_Type, &schema_keys, &PyFrozenSet_Type, &cx.name_maps,
                          &PyFrozenSet_Type, &cx.schema_list, &PyFrozenSet_Type,
                          &cx.one_schema)) {
        return NULL;
    }
    if (!PyDict_CheckExact(tool)) {
        Py_RETURN_NONE;
    }
    PyObject *name = NULL, *params = NULL, *result = NULL;
    int rc = FW_OK;
    PyObject *raw_name = PyDict_GetItemString(tool, "name");  /* borrowed */
    if (raw_name == NULL) {
        name = PyUnicode_FromStringAndSize("", 0);
    }
    else if (PyUnicode_CheckExact(raw_name)) {
        name = tx_split_name(&cx, raw_name, &rc);
    }
    else {
        rc = FW_DECLINE;  /* str(name) of another type: Python's business */
    }
    if (name == NULL && rc == FW_OK) {
        rc = FW_ERROR;
    }
    cx.out = rc == FW_OK ? PyList_New(0) : NULL;
    if (rc == FW_OK && cx.out == NULL) {
        rc = FW_ERROR;
    }
    for (Py_ssize_t i = 0; rc == FW_OK && i < PyTuple_GET_SIZE(schema_keys); i++) {
        PyObject *schema = PyDict_GetItemWithError(tool, PyTuple_GET_ITEM(schema_keys, i));
        if (schema != NULL) {
            rc = tx_schema(&cx, schema, 0);
        }
        else if (PyErr_Occurred()) {
            rc = FW_ERROR;
        }
    }
    if (rc == FW_OK) {
        PyObject *space = PyUnicode_FromStringAndSize(" ", 1);
        params = space == NULL ? NULL : PyUnicode_Join(space, cx.out);
        Py_XDECREF(space);
        rc = params == NULL ? FW_ERROR : FW_OK;
    }
    if (rc == FW_OK) {
        PyObject *description = PyDict_GetItemString(tool, "description");
        if (description == NULL || !PyUnicode_Check(description)) {
            description = PyUnicode_FromStringAndSize("", 0);
        }
        else {
            Py_INCREF(description);
        }
        result = description == NULL ? NULL : PyTuple_Pack(3, name, description, params);
        Py_XDECREF(description);
    }
    Py_XDECREF(name);
    Py_XDECREF(params);
    Py_XDECREF(cx.out);
    PyMem_Free(cx.word.data);
    if (rc == FW_DECLINE) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return result;
}


/* -- the module -------------------------------------------------------------- */

/* Fill `plan` from the Python arguments; FW_DECLINE for a plan we cannot follow.
   The key arrays are PyMem-allocated; the key bytes belong to the path's str
   objects (alive while the call runs). */
static int
make_plan(Plan *plan, PyObject *path, PyObject *kinds)
{
    Py_ssize_t depth = PyTuple_GET_SIZE(path);
    plan->depth = depth;
    plan->keys = PyMem_Malloc((size_t)(depth ? depth : 1) * sizeof(char *));
    plan->key_lens = PyMem_Malloc((size_t)(depth ? depth : 1) * sizeof(Py_ssize_t));
    if (plan->keys == NULL || plan->key_lens == NULL) {
        PyErr_NoMemory();
        return FW_ERROR;
    }
    for (Py_ssize_t i = 0; i < depth; i++) {
        PyObject *key = PyTuple_GET_ITEM(path, i);
        if (!PyUnicode_Check(key)) {
            return FW_DECLINE;
        }
        plan->keys[i] = PyUnicode_AsUTF8AndSize(key, &plan->key_lens[i]);
        if (plan->keys[i] == NULL) {
            PyErr_Clear();  /* a lone surrogate: no key in valid JSON matches it */
            return FW_DECLINE;
        }
    }
    if (PyBytes_Check(kinds)) {
        plan->single = 0;
        plan->kinds = (const unsigned char *)PyBytes_AS_STRING(kinds);
        plan->nkinds = PyBytes_GET_SIZE(kinds);
        return FW_OK;
    }
    if (PyLong_Check(kinds)) {
        long kind = PyLong_AsLong(kinds);
        if (kind == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return FW_DECLINE;
        }
        if (kind != KIND_TOOL && kind != KIND_WRAPPED) {
            return FW_DECLINE;
        }
        plan->single = 1;
        plan->single_kind = (int)kind;
        return FW_OK;
    }
    return FW_DECLINE;
}

PyDoc_STRVAR(rewrite_doc,
"rewrite(raw, path, kinds, drop_annotations, short_bytes, reducer, spans=None, /)\n"
"--\n"
"\n"
"Compress the catalog `raw` in one pass: (output, descriptions_reduced,\n"
"annotations_dropped), equal to catalog.serialize(doc) after catalog.rewrite(doc)\n"
"on doc = catalog.parse(raw); or None when the input is outside what this\n"
"handles exactly (then the caller runs the pure-Python path).\n"
"\n"
"path: the keys from the root to the tools' container. kinds: bytes, one entry\n"
"per element of the array there (0 data, 1 a tool, 2 a tool under \"function\");\n"
"or the int 1 or 2 when the value at path is a single tool object.\n"
"reducer(str) -> str is called for each description but short folded ASCII ones.\n"
"spans: a list to which (start, end, out_start, out_end) of each tool object, in\n"
"the input and in the output, is appended in document order (as spans() gives\n"
"the input's); left partly filled when the result is None.");

static PyObject *
fastwalk_rewrite(PyObject *module, PyObject *args)
{
    PyObject *raw, *path, *kinds, *short_obj, *reducer, *spans = NULL;
    int drop_annotations;

    if (!PyArg_ParseTuple(args, "O!O!OpOO|O!:rewrite", &PyBytes_Type, &raw, &PyTuple_Type,
                          &path, &kinds, &drop_annotations, &short_obj, &reducer,
                          &PyList_Type, &spans)) {
        return NULL;
    }
    /* clipped, not refused: no string is longer than PY_SSIZE_T_MAX anyway */
    Py_ssize_t short_bytes = PyNumber_AsSsize_t(short_obj, NULL);
    if (short_bytes == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyCallable_Check(reducer)) {
        PyErr_SetString(PyExc_TypeError, "rewrite: reducer must be callable");
        return NULL;
    }

    Walker w;
    memset(&w, 0, sizeof(w));
    w.src = (const unsigned char *)PyBytes_AS_STRING(raw);
    w.end = PyBytes_GET_SIZE(raw);
    w.drop_annotations = drop_annotations;
    w.short_bytes = short_bytes;
    w.reducer = reducer;
    w.tool_spans = spans;

    Plan plan;
    memset(&plan, 0, sizeof(plan));
    PyObject *result = NULL;
    int rc = make_plan(&plan, path, kinds);
    if (rc == FW_OK && w.end >= 3 && memcmp(w.src, "\xEF\xBB\xBF", 3) == 0) {
        rc = FW_DECLINE;  /* parse() strips a BOM; orjson would not write one back */
    }
    if (rc == FW_OK) {  /* allocated up front: no NULL base pointer, even for "" keys */
        rc = buf_reserve(&w.out, w.end + 16) < 0 || buf_reserve(&w.keybytes, 256) < 0
             ? FW_ERROR : FW_OK;
    }
    if (rc == FW_OK) {
        skip_ws(&w);
        rc = path_value(&w, &plan, 0);
    }
    if (rc == FW_OK) {
        skip_ws(&w);
        if (w.pos != w.end) {
            rc = FW_DECLINE;  /* a second value, or trailing data */
        }
    }
    if (rc == FW_OK) {
        PyObject *out = PyBytes_FromStringAndSize(w.out.data, w.out.len);
        if (out != NULL) {
            result = Py_BuildValue("(Nnn)", out, w.reduced, w.dropped);
        }
    }
    else if (rc == FW_DECLINE) {
        result = Py_NewRef(Py_None);
    }
    /* FW_ERROR: the exception is set, result stays NULL */
    PyMem_Free(plan.keys);
    PyMem_Free(plan.key_lens);
    walker_free(&w);
    return result;
}

PyDoc_STRVAR(skim_doc,
"skim(raw, max_depth, /)\n"
"--\n"
"\n"
"The JSON document `raw` as Python objects down to depth max_depth (the root is\n"
"depth 0): every dict or list deeper than that is checked and skipped, and comes\n"
"back empty. Scalars are real values (an int over the int() digit limit is None).\n"
"None for any document rewrite() refuses whatever the plan: not strict JSON or\n"
"UTF-8, a BOM, duplicate keys, lone surrogates, more than MAX_NESTING open\n"
"containers. (The document null is None too: no catalog either way.)");

static PyObject *
fastwalk_skim(PyObject *module, PyObject *args)
{
    PyObject *raw;
    int max_depth;

    if (!PyArg_ParseTuple(args, "O!i:skim", &PyBytes_Type, &raw, &max_depth)) {
        return NULL;
    }
    Walker w;
    memset(&w, 0, sizeof(w));
    w.src = (const unsigned char *)PyBytes_AS_STRING(raw);
    w.end = PyBytes_GET_SIZE(raw);
    w.quiet = 1;

    PyObject *keys[KEY_CACHE] = {NULL};
    PyObject *value = NULL;
    int rc = FW_OK;
    if (w.end >= 3 && memcmp(w.src, "\xEF\xBB\xBF", 3) == 0) {
        rc = FW_DECLINE;  /* as rewrite() */
    }
    if (rc == FW_OK) {  /* no NULL base pointer, even for "" keys */
        rc = buf_reserve(&w.keybytes, 256) < 0 ? FW_ERROR : FW_OK;
    }
    if (rc == FW_OK) {
        skip_ws(&w);
        rc = skim_value(&w, 0, max_depth, keys, &value);
    }
    if (rc == FW_OK) {
        skip_ws(&w);
        if (w.pos != w.end) {
            Py_CLEAR(value);
            rc = FW_DECLINE;  /* a second value, or trailing data */
        }
    }
    if (rc == FW_DECLINE) {
        value = Py_NewRef(Py_None);
    }
    /* FW_ERROR: the exception is set, value is NULL */
    for (int i = 0; i < KEY_CACHE; i++) {
        Py_XDECREF(keys[i]);
    }
    walker_free(&w);
    return value;
}

PyDoc_STRVAR(spans_doc,
"spans(raw, path, kinds, /)\n"
"--\n"
"\n"
"[(start, end)] of each tool object the plan (as for rewrite) names in `raw`, in\n"
"document order: the element, or its \"function\" member's value. None for any\n"
"input rewrite() would refuse, or a plan the document does not follow.");

static PyObject *
fastwalk_spans(PyObject *module, PyObject *args)
{
    PyObject *raw, *path, *kinds;

    if (!PyArg_ParseTuple(args, "O!O!O:spans", &PyBytes_Type, &raw, &PyTuple_Type,
                          &path, &kinds)) {
        return NULL;
    }
    Walker w;
    memset(&w, 0, sizeof(w));
    w.src = (const unsigned char *)PyBytes_AS_STRING(raw);
    w.end = PyBytes_GET_SIZE(raw);
    w.quiet = 1;

    Plan plan;
    memset(&plan, 0, sizeof(plan));
    PyObject *spans = PyList_New(0);
    if (spans == NULL) {
        return NULL;
    }
    int rc = make_plan(&plan, path, kinds);
    if (rc == FW_OK && w.end >= 3 && memcmp(w.src, "\xEF\xBB\xBF", 3) == 0) {
        rc = FW_DECLINE;  /* as rewrite() */
    }
    if (rc == FW_OK) {
        rc = buf_reserve(&w.keybytes, 256) < 0 ? FW_ERROR : FW_OK;
    }
    if (rc == FW_OK) {
        skip_ws(&w);
        rc = span_path_value(&w, &plan, 0, spans);
    }
    if (rc == FW_OK) {
        skip_ws(&w);
        if (w.pos != w.end) {
            rc = FW_DECLINE;  /* a second value, or trailing data */
        }
    }
    PyMem_Free(plan.keys);
    PyMem_Free(plan.key_lens);
    walker_free(&w);
    if (rc == FW_OK) {
        return spans;
    }
    Py_DECREF(spans);
    return rc == FW_DECLINE ? Py_NewRef(Py_None) : NULL;
}

/* -- the index's tools: toolspans._located_tools in one call a document ------- */

/* A `compress --index` worker needs, per tool compress's C path located (its span
   in the original and in the output), the sha256 of its bytes, its compressed
   definition and, for a tool not seen yet, its name and search text
   (toolsearch.search_fields of the parsed tool). index_tools() gives all of it in
   one call a document: the search text is read from the tool's own bytes (a quiet
   walk as strict as rewrite()'s, nothing built but the text), mirroring
   toolsearch._search_fields for what it handles exactly; a tool it does not (a name
   not printable ASCII or not a str, an enum number that is not an integer of up to
   18 digits, ...) comes back with None for its name and text, for Python to fill.
   Known texts are read from, and new ones added to, the caller's cache (keyed by
   the sha256), emptied when full as toolspans._described empties it. */

typedef struct {
    const char **names;
    Py_ssize_t *lens;
    Py_ssize_t n;
} KeySet;

#define MAX_SCHEMA_KEYS 8

typedef struct {
    KeySet name_maps, schema_list, one_schema, schema_keys;
    Buf params[MAX_SCHEMA_KEYS];    /* the text of each schema key's schema */
    Py_ssize_t pieces[MAX_SCHEMA_KEYS];
    Buf name, description, words;
    int has_name, has_description;
} ToolText;

typedef struct {
    ToolText *tt;
    Py_ssize_t key;                 /* the schema key whose text is being read */
    int depth;
} TextLevel;

/* The str objects a call uses for every tool, made once a call. */
typedef struct {
    PyObject *name, *description, *params;      /* the fields' keys */
    PyObject *hexdigest;                        /* the hash's method */
} Names;

static int
names_make(Names *names)
{
    names->name = PyUnicode_InternFromString("name");
    names->description = PyUnicode_InternFromString("description");
    names->params = PyUnicode_InternFromString("params");
    names->hexdigest = PyUnicode_InternFromString("hexdigest");
    return names->name && names->description && names->params && names->hexdigest
           ? FW_OK : FW_ERROR;
}

static void
names_free(Names *names)
{
    Py_XDECREF(names->name);
    Py_XDECREF(names->description);
    Py_XDECREF(names->params);
    Py_XDECREF(names->hexdigest);
}

static int
keyset_fill(KeySet *set, PyObject *items)
{
    PyObject *seq = PySequence_Fast(items, "a key set");
    if (seq == NULL) {
        return FW_ERROR;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    set->names = PyMem_Malloc((size_t)(n + 1) * sizeof(char *));
    set->lens = PyMem_Malloc((size_t)(n + 1) * sizeof(Py_ssize_t));
    int rc = set->names == NULL || set->lens == NULL ? FW_ERROR : FW_OK;
    if (rc == FW_ERROR) {
        PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; rc == FW_OK && i < n; i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyUnicode_CheckExact(key)) {
            rc = FW_DECLINE;
            break;
        }
        /* the bytes belong to the str, which the caller's set keeps alive */
        set->names[i] = PyUnicode_AsUTF8AndSize(key, &set->lens[i]);
        rc = set->names[i] == NULL ? FW_ERROR : FW_OK;
        set->n = i + 1;
    }
    Py_DECREF(seq);
    return rc;
}

static void
keyset_free(KeySet *set)
{
    PyMem_Free(set->names);
    PyMem_Free(set->lens);
}

/* The index of key in the set, or -1. */
static Py_ssize_t
keyset_find(const KeySet *set, const char *key, Py_ssize_t len)
{
    for (Py_ssize_t i = 0; i < set->n; i++) {
        if (set->lens[i] == len && memcmp(set->names[i], key, (size_t)len) == 0) {
            return i;
        }
    }
    return -1;
}

#define IS_KEY(key, len, word) ((len) == sizeof(word) - 1 && memcmp((key), (word), sizeof(word) - 1) == 0)

/* Start one more piece of the params text (" ".join: a space before all but the first). */
static int
text_piece(TextLevel *level)
{
    Py_ssize_t k = level->key;
    if (level->tt->pieces[k]++ > 0) {
        return buf_byte(&level->tt->params[k], ' ') < 0 ? FW_ERROR : FW_OK;
    }
    return FW_OK;
}

static int
text_put(TextLevel *level, const char *p, Py_ssize_t n)
{
    int rc = text_piece(level);
    if (rc == FW_OK && buf_put(&level->tt->params[level->key], p, n) < 0) {
        rc = FW_ERROR;
    }
    return rc;
}

static int text_schema(Walker *w, TextLevel *level, int depth);

/* An enum value: str(v) of a str, an int or a bool (True), nothing of the rest. */
static int
text_enum_element(Walker *w, Py_ssize_t index, void *ctx)
{
    TextLevel *level = ctx;
    unsigned char c = peek(w);
    int rc;
    if (c == '"') {
        Str str;
        return (rc = read_string(w, &str)) != FW_OK ? rc : text_put(level, str.ptr, str.len);
    }
    if (c == 't' || c == 'f') {
        if ((rc = copy_literal(w, c == 't' ? "true" : "false", c == 't' ? 4 : 5)) != FW_OK) {
            return rc;
        }
        return c == 't' ? text_put(level, "True", 4) : text_put(level, "False", 5);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        Py_ssize_t start = w->pos;
        int is_float;
        if ((rc = scan_number(w, &is_float)) != FW_OK) {
            return rc;
        }
        const char *s = (const char *)w->src + start;
        Py_ssize_t n = w->pos - start;
        if (is_float || n > 18) {
            return FW_DECLINE;  /* str(float) or a big int: Python's */
        }
        if (n == 2 && s[0] == '-' && s[1] == '0') {
            return text_put(level, "0", 1);  /* str(int("-0")) */
        }
        return text_put(level, s, n);  /* JSON has no leading zeros: the literal is str() */
    }
    return copy_value(w);  /* null, a list, an object: read, not text */
}

static int
text_name_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    TextLevel *level = ctx;
    int rc = text_piece(level);
    if (rc == FW_OK) {
        rc = split_words(&level->tt->params[level->key], (const unsigned char *)key, key_len);
    }
    return rc != FW_OK ? rc : text_schema(w, level, level->depth + 1);
}

static int
text_schema_element(Walker *w, Py_ssize_t index, void *ctx)
{
    TextLevel *level = ctx;
    return text_schema(w, level, level->depth + 1);
}

/* _schema_text's branches, in its order. */
static int
text_schema_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    TextLevel *level = ctx;
    const ToolText *tt = level->tt;
    unsigned char c = peek(w);
    if (c == '"' && IS_KEY(key, key_len, "description")) {
        Str str;
        int rc = read_string(w, &str);
        return rc != FW_OK ? rc : text_put(level, str.ptr, str.len);
    }
    if (c == '[' && IS_KEY(key, key_len, "enum")) {
        return walk_array(w, text_enum_element, level, NULL);
    }
    if (c == '{' && keyset_find(&tt->name_maps, key, key_len) >= 0) {
        return walk_object(w, text_name_member, level);
    }
    if (c == '[' && keyset_find(&tt->schema_list, key, key_len) >= 0) {
        return walk_array(w, text_schema_element, level, NULL);
    }
    if (keyset_find(&tt->one_schema, key, key_len) >= 0) {
        return text_schema(w, level, level->depth + 1);
    }
    return copy_value(w);
}

/* _schema_text(node, depth): an object's text; anything else is read, not text. */
static int
text_schema(Walker *w, TextLevel *level, int depth)
{
    if (peek(w) != '{' || depth > 64) {
        return copy_value(w);
    }
    TextLevel inner = {level->tt, level->key, depth};
    return walk_object(w, text_schema_member, &inner);
}

static int
text_keep(Buf *dst, int *has, Walker *w)
{
    Str str;
    int rc = read_string(w, &str);
    if (rc != FW_OK) {
        return rc;
    }
    dst->len = 0;
    *has = 1;
    return buf_put(dst, str.ptr, str.len) < 0 ? FW_ERROR : FW_OK;
}

/* A member of the tool object itself. */
static int
text_tool_member(Walker *w, const char *key, Py_ssize_t key_len, void *ctx)
{
    ToolText *tt = ctx;
    if (IS_KEY(key, key_len, "name")) {
        /* str(name) of anything but a str: Python's */
        return peek(w) == '"' ? text_keep(&tt->name, &tt->has_name, w) : FW_DECLINE;
    }
    if (IS_KEY(key, key_len, "description") && peek(w) == '"') {
        return text_keep(&tt->description, &tt->has_description, w);
    }
    Py_ssize_t k = keyset_find(&tt->schema_keys, key, key_len);
    if (k >= 0) {
        TextLevel level = {tt, k, 0};
        return text_schema(w, &level, 0);
    }
    return copy_value(w);
}

/* The params text: the schema keys' texts in schema_keys' order, one " " between. */
static PyObject *
text_params(ToolText *tt)
{
    Buf *all = &tt->words;
    all->len = 0;
    Py_ssize_t joined = 0;
    for (Py_ssize_t k = 0; k < tt->schema_keys.n; k++) {
        if (tt->pieces[k] == 0) {
            continue;
        }
        if ((joined++ && buf_byte(all, ' ') < 0)
            || buf_put(all, tt->params[k].data, tt->params[k].len) < 0) {
            return NULL;
        }
    }
    return PyUnicode_DecodeUTF8(all->data, all->len, NULL);
}

/* (name, {"name", "description", "params"}) of the tool in w's bytes, after a walk. */
static PyObject *
text_described(ToolText *tt, const Names *names, int *rc)
{
    PyObject *name = NULL, *split = NULL, *description = NULL, *params = NULL;
    PyObject *fields = NULL, *result = NULL;
    tt->words.len = 0;
    *rc = tt->has_name ? split_words(&tt->words, (const unsigned char *)tt->name.data,
                                     tt->name.len) : FW_OK;
    if (*rc != FW_OK) {
        return NULL;
    }
    split = PyUnicode_DecodeUTF8(tt->words.data, tt->words.len, NULL);
    name = PyUnicode_DecodeUTF8(tt->has_name ? tt->name.data : "", tt->has_name ? tt->name.len : 0,
                                NULL);
    description = PyUnicode_DecodeUTF8(tt->has_description ? tt->description.data : "",
                                       tt->has_description ? tt->description.len : 0, NULL);
    params = split && name && description ? text_params(tt) : NULL;
    fields = params ? PyDict_New() : NULL;
    if (fields != NULL && PyDict_SetItem(fields, names->name, split) == 0
        && PyDict_SetItem(fields, names->description, description) == 0
        && PyDict_SetItem(fields, names->params, params) == 0) {
        result = PyTuple_Pack(2, name, fields);
    }
    *rc = result == NULL ? FW_ERROR : FW_OK;
    Py_XDECREF(name);
    Py_XDECREF(split);
    Py_XDECREF(description);
    Py_XDECREF(params);
    Py_XDECREF(fields);
    return result;
}

/* The (name, fields) of the tool object piece[:n], or NULL with FW_DECLINE or
   FW_ERROR in *rc. */
static PyObject *
text_of_tool(Walker *w, ToolText *tt, const Names *names, const char *piece, Py_ssize_t n,
             int *rc)
{
    w->src = (const unsigned char *)piece;
    w->end = n;
    w->pos = 0;
    w->nesting = 0;
    w->nkeys = 0;
    w->keybytes.len = 0;
    tt->has_name = tt->has_description = 0;
    for (Py_ssize_t k = 0; k < tt->schema_keys.n; k++) {
        tt->params[k].len = 0;
        tt->pieces[k] = 0;
    }
    skip_ws(w);
    *rc = peek(w) == '{' ? walk_object(w, text_tool_member, tt) : FW_DECLINE;
    if (*rc == FW_OK) {
        skip_ws(w);
        *rc = w->pos == w->end ? FW_OK : FW_DECLINE;  /* else the span is not one object */
    }
    return *rc == FW_OK ? text_described(tt, names, rc) : NULL;
}

static void
tooltext_free(ToolText *tt)
{
    keyset_free(&tt->name_maps);
    keyset_free(&tt->schema_list);
    keyset_free(&tt->one_schema);
    keyset_free(&tt->schema_keys);
    for (Py_ssize_t k = 0; k < MAX_SCHEMA_KEYS; k++) {
        PyMem_Free(tt->params[k].data);
    }
    PyMem_Free(tt->name.data);
    PyMem_Free(tt->description.data);
    PyMem_Free(tt->words.data);
}

/* A span (a, b, c, d) of the located list, checked against the two documents. */
static int
read_span(PyObject *item, Py_ssize_t raw_len, Py_ssize_t out_len, Py_ssize_t at[4])
{
    /* out_len < 0: the output's span is not read (compact definitions) */
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4) {
        return FW_DECLINE;
    }
    for (int i = 0; i < 4; i++) {
        PyObject *v = PyTuple_GET_ITEM(item, i);
        if (!PyLong_CheckExact(v)) {
            return FW_DECLINE;
        }
        at[i] = PyLong_AsSsize_t(v);
        if (at[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return FW_DECLINE;
        }
    }
    return 0 <= at[0] && at[0] <= at[1] && at[1] <= raw_len
           && (out_len < 0 || (0 <= at[2] && at[2] <= at[3] && at[3] <= out_len))
           ? FW_OK : FW_DECLINE;
}

/* The known (name, fields) of a digest, a new reference; or None (not known, or
   not described here: Python's), or NULL on error. */
static PyObject *
tool_described(Walker *w, ToolText *tt, const Names *names, PyObject *known,
               Py_ssize_t known_max, PyObject *digest, const char *piece, Py_ssize_t n)
{
    PyObject *found = PyDict_GetItemWithError(known, digest);  /* borrowed */
    if (found != NULL) {
        if (PyTuple_CheckExact(found) && PyTuple_GET_SIZE(found) == 2) {
            return Py_NewRef(found);
        }
        return Py_NewRef(Py_None);
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    int rc;
    found = text_of_tool(w, tt, names, piece, n, &rc);
    if (rc == FW_DECLINE) {
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    if (found == NULL) {
        return NULL;
    }
    if (PyDict_GET_SIZE(known) >= known_max) {
        PyDict_Clear(known);
    }
    if (PyDict_SetItem(known, digest, found) < 0) {
        Py_DECREF(found);
        return NULL;
    }
    return found;
}

/* The tool raw[a:b] re-serialized compact, as catalog.serialize(catalog.parse(it))
   writes it (rewrite()'s copy of a value: literals as written, strings escaped as
   orjson escapes them), as a str; NULL with FW_DECLINE or FW_ERROR in *rc. */
static PyObject *
compact_definition(Walker *copier, const char *raw, const Py_ssize_t at[4], int *rc)
{
    copier->src = (const unsigned char *)raw + at[0];
    copier->end = at[1] - at[0];
    copier->pos = copier->nesting = 0;
    copier->nkeys = copier->keybytes.len = copier->out.len = 0;
    *rc = copy_value(copier);
    if (*rc == FW_OK && copier->pos != copier->end) {
        *rc = FW_DECLINE;
    }
    PyObject *text = *rc != FW_OK ? NULL
                     : PyUnicode_DecodeUTF8(copier->out.data, copier->out.len, NULL);
    if (*rc == FW_OK && text == NULL) {
        *rc = FW_ERROR;
    }
    return text;
}

/* One tool's (name, digest, start, length, definition, fields); NULL with FW_DECLINE
   (a compact definition the copier does not write) or FW_ERROR in *rc. The definition
   is out[c:d], or with a copier (a passthrough's tools) raw[a:b] made compact. */
static PyObject *
index_tool(Walker *w, ToolText *tt, Walker *copier, const char *raw, const char *out,
           const Py_ssize_t at[4], PyObject *known, Py_ssize_t known_max, PyObject *sha256,
           const Names *names, int *rc)
{
    *rc = FW_ERROR;
    PyObject *piece = PyBytes_FromStringAndSize(raw + at[0], at[1] - at[0]);
    PyObject *hash = piece == NULL ? NULL : PyObject_CallOneArg(sha256, piece);
    PyObject *digest = hash == NULL ? NULL : PyObject_CallMethodNoArgs(hash, names->hexdigest);
    PyObject *definition = digest == NULL ? NULL
                           : copier != NULL ? compact_definition(copier, raw, at, rc)
                           : PyUnicode_DecodeUTF8(out + at[2], at[3] - at[2], NULL);
    PyObject *described = definition == NULL ? NULL
                          : tool_described(w, tt, names, known, known_max, digest,
                                           raw + at[0], at[1] - at[0]);
    PyObject *result = NULL;
    if (described != NULL) {
        PyObject *name = described == Py_None ? Py_None : PyTuple_GET_ITEM(described, 0);
        PyObject *fields = described == Py_None ? Py_None : PyTuple_GET_ITEM(described, 1);
        result = Py_BuildValue("(OOnnOO)", name, digest, at[0], at[1] - at[0], definition,
                               fields);
    }
    *rc = result != NULL ? FW_OK : *rc == FW_DECLINE ? FW_DECLINE : FW_ERROR;
    Py_XDECREF(piece);
    Py_XDECREF(hash);
    Py_XDECREF(digest);
    Py_XDECREF(definition);
    Py_XDECREF(described);
    return result;
}

PyDoc_STRVAR(index_tools_doc,
"index_tools(raw, out, spans, known, known_max, sha256, schema_keys, name_maps,\n"
"            schema_list, one_schema, compact=False, /)\n"
"--\n"
"\n"
"toolspans._located_tools(raw, out, spans): per (start, end, out_start, out_end) of\n"
"spans, (name, sha256 hex, start, length, definition, fields), with None for the\n"
"name and fields of a tool whose text Python must build; or None to run the Python\n"
"path (a span that is not one). known: the cache of (name, fields) by sha256 hex,\n"
"emptied when it holds known_max; sha256: hashlib.sha256. compact: each definition\n"
"is raw[start:end] re-serialized compact (a passthrough's tools), out is not read.");

static PyObject *
fastwalk_index_tools(PyObject *module, PyObject *args)
{
    PyObject *raw, *out, *spans, *known, *sha256, *schema_keys, *name_maps, *schema_list;
    PyObject *one_schema;
    Py_ssize_t known_max;
    int compact = 0;
    if (!PyArg_ParseTuple(args, "O!O!O!O!nOO!O!O!O!|p:index_tools", &PyBytes_Type, &raw,
                          &PyBytes_Type, &out, &PyList_Type, &spans, &PyDict_Type, &known,
                          &known_max, &sha256, &PyTuple_Type, &schema_keys, &PyFrozenSet_Type,
                          &name_maps, &PyFrozenSet_Type, &schema_list, &PyFrozenSet_Type,
                          &one_schema, &compact)) {
        return NULL;
    }
    Walker w, copier;
    ToolText tt;
    memset(&w, 0, sizeof(w));
    memset(&copier, 0, sizeof(copier));
    memset(&tt, 0, sizeof(tt));
    w.quiet = 1;
    int rc = PyTuple_GET_SIZE(schema_keys) <= MAX_SCHEMA_KEYS ? FW_OK : FW_DECLINE;
    if (rc == FW_OK && (rc = keyset_fill(&tt.schema_keys, schema_keys)) == FW_OK
        && (rc = keyset_fill(&tt.name_maps, name_maps)) == FW_OK
        && (rc = keyset_fill(&tt.schema_list, schema_list)) == FW_OK) {
        rc = keyset_fill(&tt.one_schema, one_schema);
    }
    Names names = {NULL};
    if (rc == FW_OK) {
        rc = names_make(&names);
    }
    Py_ssize_t n = PyList_GET_SIZE(spans);
    PyObject *result = rc == FW_OK ? PyList_New(n) : NULL;
    if (rc == FW_OK && result == NULL) {
        rc = FW_ERROR;
    }
    const char *raw_bytes = PyBytes_AS_STRING(raw), *out_bytes = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; rc == FW_OK && i < n; i++) {
        Py_ssize_t at[4];
        rc = read_span(PyList_GET_ITEM(spans, i), PyBytes_GET_SIZE(raw),
                       compact ? -1 : PyBytes_GET_SIZE(out), at);
        PyObject *tool = rc != FW_OK ? NULL
                         : index_tool(&w, &tt, compact ? &copier : NULL, raw_bytes, out_bytes,
                                      at, known, known_max, sha256, &names, &rc);
        if (rc == FW_OK) {
            PyList_SET_ITEM(result, i, tool);
        }
    }
    names_free(&names);
    tooltext_free(&tt);
    walker_free(&w);
    walker_free(&copier);
    if (rc == FW_OK) {
        return result;
    }
    Py_XDECREF(result);
    if (rc == FW_DECLINE) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return NULL;
}

/* -- file identities (the stat cache of compress --incremental) -------------------
 *
 * fsio.identities() defines the result: fsio.identity(os.stat(path)) of each path, None
 * where it cannot be stat'ed. Here every stat() runs with the GIL released, all of them in
 * one go: called on a thread, a tree's tens of thousands of stats run beside the parent's
 * Python instead of taking turns with it for the GIL. A time outside what int64
 * nanoseconds hold (past the year 2262) gives back None for the whole list: the Python
 * path then answers. */

#include <sys/stat.h>

#define NS_SECONDS_MAX 9000000000LL  /* |seconds| * 1e9 + 999999999 fits in int64 */

static PyObject *
identity_list(const struct stat *st)
{
    long long times[2] = {(long long)st->st_mtim.tv_sec, (long long)st->st_ctim.tv_sec};
    long long nsecs[2] = {(long long)st->st_mtim.tv_nsec, (long long)st->st_ctim.tv_nsec};
    PyObject *items[5];
    items[0] = PyLong_FromUnsignedLongLong((unsigned long long)st->st_dev);
    items[1] = PyLong_FromUnsignedLongLong((unsigned long long)st->st_ino);
    items[2] = PyLong_FromLongLong((long long)st->st_size);
    for (int i = 0; i < 2; i++) {
        items[3 + i] = PyLong_FromLongLong(times[i] * 1000000000LL + nsecs[i]);
    }
    PyObject *list = PyList_New(5);
    for (int i = 0; i < 5; i++) {
        if (items[i] == NULL || list == NULL) {
            for (int j = 0; j < 5; j++) {
                Py_XDECREF(items[j]);
            }
            Py_XDECREF(list);
            return NULL;
        }
    }
    for (int i = 0; i < 5; i++) {
        PyList_SET_ITEM(list, i, items[i]);
    }
    return list;
}

static int
time_fits(const struct timespec *t)
{
    return t->tv_sec < NS_SECONDS_MAX && t->tv_sec > -NS_SECONDS_MAX;
}

PyDoc_STRVAR(identities_doc,
"identities(paths, /)\n--\n\n"
"[device, inode, size, mtime_ns, ctime_ns] of each path (os.stat, symlinks followed),\n"
"None where it cannot be stat'ed; None instead of the list to run the Python path.");

static PyObject *
fastwalk_identities(PyObject *self, PyObject *args)
{
    PyObject *paths;
    if (!PyArg_ParseTuple(args, "O!:identities", &PyList_Type, &paths)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(paths);
    PyObject **encoded = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    struct stat *stats = PyMem_Malloc((n ? n : 1) * sizeof(struct stat));
    char *found = PyMem_Calloc(n ? n : 1, 1);
    PyObject *result = NULL;
    if (encoded == NULL || stats == NULL || found == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *path = PyList_GET_ITEM(paths, i);
        if (!PyUnicode_Check(path)) {
            PyErr_SetString(PyExc_TypeError, "identities() takes a list of str");
            goto done;
        }
        encoded[i] = PyUnicode_EncodeFSDefault(path);  /* as os.stat (surrogateescape) */
        if (encoded[i] == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                goto done;
            }
            PyErr_Clear();  /* a lone surrogate: os.stat raises it, a ValueError: None */
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (encoded[i] == NULL) {
            continue;
        }
        const char *name = PyBytes_AS_STRING(encoded[i]);
        /* a NUL inside: os.stat raises ValueError, which fsio.identities reads as None */
        found[i] = (Py_ssize_t)strlen(name) == PyBytes_GET_SIZE(encoded[i])
                   && stat(name, &stats[i]) == 0;
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (found[i] && !(time_fits(&stats[i].st_mtim) && time_fits(&stats[i].st_ctim))) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    result = PyList_New(n);
    if (result == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = found[i] ? identity_list(&stats[i]) : Py_NewRef(Py_None);
        if (item == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, item);
    }
done:
    if (encoded != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_XDECREF(encoded[i]);
        }
    }
    PyMem_Free(encoded);
    PyMem_Free(stats);
    PyMem_Free(found);
    return result;
}

static PyMethodDef fastwalk_methods[] = {
    {"rewrite", fastwalk_rewrite, METH_VARARGS, rewrite_doc},
    {"skim", fastwalk_skim, METH_VARARGS, skim_doc},
    {"spans", fastwalk_spans, METH_VARARGS, spans_doc},
    {"search_fields", fastwalk_search_fields, METH_VARARGS, search_fields_doc},
    {"index_tools", fastwalk_index_tools, METH_VARARGS, index_tools_doc},
    {"identities", fastwalk_identities, METH_VARARGS, identities_doc},
    {NULL, NULL, 0, NULL}
};

static int
fastwalk_exec(PyObject *module)
{
    init_tables();
    init_known_keys();
    return PyModule_AddIntConstant(module, "MAX_NESTING", MAX_NESTING);
}

static PyModuleDef_Slot fastwalk_slots[] = {
    {Py_mod_exec, fastwalk_exec},
    {0, NULL}
};

PyDoc_STRVAR(module_doc,
"The tool-catalog compressor's C fast path: parse, walk and serialize in one pass.\n"
"\n"
"See caveman_batch.catalog.compress, which calls it and falls back to the\n"
"pure-Python reference path whenever it returns None.");

static struct PyModuleDef fastwalk_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "caveman_batch._fastwalk",
    .m_doc = module_doc,
    .m_size = 0,
    .m_methods = fastwalk_methods,
    .m_slots = fastwalk_slots,
};

PyMODINIT_FUNC
PyInit__fastwalk(void)
{
    return PyModuleDef_Init(&fastwalk_module);
}
