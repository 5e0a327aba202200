/* _fastreduce: the description reducer of caveman_batch.describe, in C.
 *
 * reduce(text, short_bytes, lead_bytes) returns exactly
 * describe.explain(text, short_bytes=..., lead_bytes=...).text, or None when the
 * input is outside what this module mirrors exactly; the caller then runs the
 * pure-Python reference path, which defines the output.  The module never
 * decides alone.
 *
 * What is mirrored, and from where:
 *
 *   describe.fold             fold_text()           (_FOLDABLE, _fold_run, strip)
 *   markup.may_hold           opens_markup(), has_closing_tag()  (MARKUP: the
 *                             text is handed back to Python, which alone keeps
 *                             fenced blocks, headings and paired tags)
 *   describe._LIST_MARKER     list_marker_at()
 *   describe._protected       span_try()            (_SPANS, finditer semantics)
 *   describe.split_sentences  find_units()          (_END_ASCII, _END_ELLIPSIS,
 *   describe._is_abbreviation is_abbreviation()      line breaks, _inside)
 *   describe.units            add_sentence()        (gluing, _ends_sentence)
 *   describe.cut_lead         append_lead()
 *   describe._reduce_once     reduce_once()         (_separator)
 *   describe.explain          fastreduce_reduce()   (passes, _is_short)
 *   rules.RuleScan            states_rule(), dfa_run()  (the RE2 alternation)
 *   rules._SIGNAL             signal_at()
 *   rules.opens_with_instruction  imperative_at()   (_IMPERATIVE)
 *                                 capitalised_imperative_at()   (_IMPERATIVE_INSIDE)
 *
 * Three of those stages are exported as well, for the tests and benchmarks that
 * compare and time them one by one: split_sentences() and units() (find_units(),
 * without and with the gluing) and rule_units() (states_rule() per span).  They
 * run the very functions reduce() runs, on a text that is already folded.
 *
 * The rule fragments have one source of truth, rules.CATEGORIES: configure()
 * receives rules._ALL and compiles the small regex subset the fragments use into
 * a byte-level DFA (subset construction at configure time), matched on the
 * lower-cased UTF-8 bytes with RE2's semantics for \b(?:...)\b: ASCII-only word
 * characters, the whole text as context, the match inside the unit's span.  The
 * abbreviation set comes from configure() too.  The patterns mirrored by hand
 * are exported as MIRRORED (their source text); a test compares them with the
 * live objects so that a change on the Python side fails until it is made here.
 *
 * Everything runs in linear time: each scan either advances a monotone cursor or
 * is bounded by a constant (the 16-character abbreviation window, at most two
 * closers).  The DFA runs from word boundaries only; its unbounded loops (\d+,
 * \w+) each cross one run of word characters right after a bounded prefix, so
 * every character is read by a bounded number of runs.
 *
 * Text is handled as an array of UCS4 code points: the input is folded into one
 * buffer as it is read; each pass writes the next text into a second buffer.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ELLIPSIS 0x2026
#define MAX_PASSES 4            /* describe._MAX_PASSES */
#define ABBREVIATION_WINDOW 16  /* describe._is_abbreviation's bounded look */
#define MAX_DFA_STATES 65535    /* configure() refuses fragments that need more */
#define MAX_REPEAT 1000         /* RE2's own limit for {m,n} */
#define MAX_NESTING 64


/* ------------------------------------------------------------------------ */
/* Character predicates, as Python's str methods and `re` define them        */
/* ------------------------------------------------------------------------ */

/* RE2's \w on UTF-8 bytes: [0-9A-Za-z_]; every non-ASCII byte is a non-word byte */
static inline int
is_word_byte(Py_UCS4 c)
{
    return c < 128 && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')
                       || (c >= 'A' && c <= 'Z') || c == '_');
}

/* re's Unicode \w: str.isalnum() or "_" */
static inline int
is_word_uni(Py_UCS4 c)
{
    return c < 128 ? is_word_byte(c) : Py_UNICODE_ISALNUM(c);
}

/* RuleScan's lower-casing, one character at a time.  str.lower() maps every
 * character to one character except U+0130 (two); RuleScan then lower-cases
 * per character and keeps U+0130 as it is.  The only context rule of
 * str.lower(), the final sigma, yields another two-byte Greek letter: it
 * matters only to fragments holding Greek letters (see Config.sigma_sensitive). */
static inline Py_UCS4
lower_char(Py_UCS4 c)
{
    if (c < 128) {
        return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    }
    if (c == 0x130) {
        return c;
    }
    return Py_UNICODE_TOLOWER(c);
}

static inline int
utf8_len(Py_UCS4 c)
{
    return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

static inline int
utf8_encode(Py_UCS4 c, uint8_t *b)
{
    if (c < 0x80) {
        b[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        b[0] = (uint8_t)(0xC0 | (c >> 6));
        b[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        b[0] = (uint8_t)(0xE0 | (c >> 12));
        b[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        b[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | (c >> 18));
    b[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
    b[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    b[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* describe._TERMINAL */
static inline int
is_terminal(Py_UCS4 c)
{
    return c == '.' || c == '!' || c == '?' || c == ELLIPSIS;
}

/* describe._CLOSERS, also the class in _END_ASCII's lookahead */
static inline int
is_closer(Py_UCS4 c)
{
    return c == '"' || c == '\'' || c == 0x201D || c == 0x2019 || c == ')' || c == ']';
}

/* describe._OPENERS */
static inline int
is_opener(Py_UCS4 c)
{
    return c == '(' || c == '"' || c == '\'' || c == 0x201C || c == 0x2018 || c == '[';
}

/* what cut_lead strips from the end of a cut: " ,;:–—-(" */
static inline int
is_lead_trailer(Py_UCS4 c)
{
    return c == ' ' || c == ',' || c == ';' || c == ':' || c == 0x2013 || c == 0x2014
           || c == '-' || c == '(';
}


/* ------------------------------------------------------------------------ */
/* The rule fragments: a regex subset compiled to a DFA over bytes           */
/* ------------------------------------------------------------------------ */

/* The parse tree of one fragment.  Non-ASCII literals become the sequence of
 * their UTF-8 bytes (RE2 matches the pattern's UTF-8 on the text's UTF-8). */
enum { OP_SET, OP_CAT, OP_ALT, OP_REP };

typedef struct Node {
    int op;
    int min, max;           /* OP_REP: max < 0 means no upper bound */
    uint8_t set[32];        /* OP_SET: the bytes it matches */
    struct Node **kids;     /* OP_CAT, OP_ALT: the parts; OP_REP: kids[0] */
    int nkids, cap;
} Node;

static void
node_free(Node *node)
{
    if (node == NULL) {
        return;
    }
    for (int i = 0; i < node->nkids; i++) {
        node_free(node->kids[i]);
    }
    PyMem_Free(node->kids);
    PyMem_Free(node);
}

static Node *
node_new(int op)
{
    Node *node = PyMem_Calloc(1, sizeof(Node));
    if (node == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    node->op = op;
    return node;
}

/* Adds `kid` to `node`; frees `kid` on failure. */
static int
node_add(Node *node, Node *kid)
{
    if (node->nkids == node->cap) {
        int cap = node->cap ? node->cap * 2 : 4;
        Node **kids = PyMem_Realloc(node->kids, (size_t)cap * sizeof(Node *));
        if (kids == NULL) {
            node_free(kid);
            PyErr_NoMemory();
            return -1;
        }
        node->kids = kids;
        node->cap = cap;
    }
    node->kids[node->nkids++] = kid;
    return 0;
}

static inline void
set_add(uint8_t *set, unsigned b)
{
    set[b >> 3] |= (uint8_t)(1u << (b & 7));
}

static inline int
set_has(const uint8_t *set, unsigned b)
{
    return (set[b >> 3] >> (b & 7)) & 1;
}

typedef struct {
    const Py_UCS4 *s;
    Py_ssize_t n, i;
    int depth;
    PyObject *fragment;     /* for error messages */
} Parser;

static Node *
parse_error(Parser *p, const char *why)
{
    PyErr_Format(PyExc_ValueError, "rule fragment %R: %s at offset %zd (outside "
                 "the regex subset _fastreduce compiles)", p->fragment, why, p->i);
    return NULL;
}

static Node *
set_node(const uint8_t *set)
{
    Node *node = node_new(OP_SET);
    if (node != NULL) {
        memcpy(node->set, set, 32);
    }
    return node;
}

/* A literal character: one byte set, or the byte sequence of its UTF-8. */
static Node *
literal_node(Parser *p, Py_UCS4 c)
{
    uint8_t bytes[4], set[32];
    if (c >= 0xD800 && c <= 0xDFFF) {
        return parse_error(p, "surrogate");
    }
    int len = utf8_encode(c, bytes);
    if (len == 1) {
        memset(set, 0, 32);
        set_add(set, bytes[0]);
        return set_node(set);
    }
    Node *cat = node_new(OP_CAT);
    if (cat == NULL) {
        return NULL;
    }
    for (int i = 0; i < len; i++) {
        memset(set, 0, 32);
        set_add(set, bytes[i]);
        Node *byte = set_node(set);
        if (byte == NULL || node_add(cat, byte) < 0) {
            node_free(cat);
            return NULL;
        }
    }
    return cat;
}

/* The class escapes RE2 defines on ASCII: \d \w \s; returns 0 if `e` is none. */
static int
class_escape(Py_UCS4 e, uint8_t *set)
{
    unsigned b;
    switch (e) {
    case 'd':
        for (b = '0'; b <= '9'; b++) set_add(set, b);
        return 1;
    case 'w':
        for (b = 0; b < 128; b++) {
            if (is_word_byte(b)) set_add(set, b);
        }
        return 1;
    case 's':
        set_add(set, '\t'); set_add(set, '\n'); set_add(set, '\f');
        set_add(set, '\r'); set_add(set, ' ');
        return 1;
    default:
        return 0;
    }
}

/* An escaped punctuation character stands for itself. */
static int
is_escapable(Py_UCS4 e)
{
    return e < 128 && e > ' ' && !is_word_byte(e);
}

static Node *
parse_class(Parser *p)
{
    uint8_t set[32];
    int first = 1;
    memset(set, 0, 32);
    if (p->i < p->n && p->s[p->i] == '^') {
        return parse_error(p, "negated class");
    }
    while (p->i < p->n) {
        Py_UCS4 c = p->s[p->i], lo, hi;
        if (c == ']' && !first) {
            p->i++;
            return set_node(set);
        }
        first = 0;
        if (c == '\\') {
            if (p->i + 1 >= p->n) {
                return parse_error(p, "trailing backslash");
            }
            Py_UCS4 e = p->s[p->i + 1];
            p->i += 2;
            if (class_escape(e, set)) {
                continue;
            }
            if (!is_escapable(e)) {
                return parse_error(p, "unsupported escape in class");
            }
            lo = e;
        }
        else {
            lo = c;
            p->i++;
        }
        if (lo >= 128) {
            return parse_error(p, "non-ASCII class member");
        }
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            hi = p->s[p->i + 1];
            if (hi == '\\' || hi >= 128 || hi < lo) {
                return parse_error(p, "unsupported range");
            }
            p->i += 2;
        }
        for (Py_UCS4 b = lo; b <= hi; b++) {
            set_add(set, b);
        }
    }
    return parse_error(p, "unterminated class");
}

static Node *parse_alt(Parser *p);

static Node *
parse_atom(Parser *p)
{
    Py_UCS4 c = p->s[p->i++];
    uint8_t set[32];
    Node *node;
    switch (c) {
    case '(':
        if (p->i < p->n && p->s[p->i] == '?') {
            if (p->i + 1 >= p->n || p->s[p->i + 1] != ':') {
                return parse_error(p, "unsupported group");
            }
            p->i += 2;
        }
        if (++p->depth > MAX_NESTING) {
            return parse_error(p, "nesting too deep");
        }
        node = parse_alt(p);
        p->depth--;
        if (node == NULL) {
            return NULL;
        }
        if (p->i >= p->n || p->s[p->i] != ')') {
            node_free(node);
            return parse_error(p, "missing )");
        }
        p->i++;
        return node;
    case '[':
        return parse_class(p);
    case '\\':
        if (p->i >= p->n) {
            return parse_error(p, "trailing backslash");
        }
        c = p->s[p->i++];
        memset(set, 0, 32);
        if (class_escape(c, set)) {
            return set_node(set);
        }
        if (!is_escapable(c)) {
            return parse_error(p, "unsupported escape");
        }
        return literal_node(p, c);
    case '.': case '^': case '$': case '*': case '+': case '?':
    case '{': case '}': case ')': case ']': case '|':
        p->i--;
        return parse_error(p, "unsupported or misplaced operator");
    default:
        return literal_node(p, c);
    }
}

/* Reads a decimal number of at most 4 digits; -1 if there is none. */
static int
parse_count(Parser *p)
{
    int value = 0, digits = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9' && digits < 5) {
        value = value * 10 + (int)(p->s[p->i] - '0');
        p->i++;
        digits++;
    }
    return digits ? value : -1;
}

/* The quantifiers after an atom: ? * + {m} {m,} {m,n}, each optionally lazy
 * (laziness does not change which strings match, and only that matters here). */
static Node *
parse_quantifier(Parser *p, Node *atom)
{
    int min, max;
    if (p->i >= p->n) {
        return atom;
    }
    switch (p->s[p->i]) {
    case '?': min = 0; max = 1; p->i++; break;
    case '*': min = 0; max = -1; p->i++; break;
    case '+': min = 1; max = -1; p->i++; break;
    case '{':
        p->i++;
        min = parse_count(p);
        max = min;
        if (min >= 0 && p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            max = (p->i < p->n && p->s[p->i] == '}') ? -1 : parse_count(p);
            if (max == -1 && (p->i >= p->n || p->s[p->i] != '}')) {
                min = -1;
            }
        }
        if (min < 0 || p->i >= p->n || p->s[p->i] != '}'
                || min > MAX_REPEAT || max > MAX_REPEAT || (max >= 0 && max < min)) {
            node_free(atom);
            return parse_error(p, "unsupported repetition");
        }
        p->i++;
        break;
    default:
        return atom;
    }
    if (p->i < p->n && p->s[p->i] == '?') {
        p->i++;  /* lazy */
    }
    if (p->i < p->n && (p->s[p->i] == '?' || p->s[p->i] == '*' || p->s[p->i] == '+'
                        || p->s[p->i] == '{')) {
        node_free(atom);
        return parse_error(p, "repeated repetition");
    }
    Node *rep = node_new(OP_REP);
    if (rep == NULL) {
        node_free(atom);
        return NULL;
    }
    rep->min = min;
    rep->max = max;
    if (node_add(rep, atom) < 0) {
        node_free(rep);
        return NULL;
    }
    return rep;
}

static Node *
parse_seq(Parser *p)
{
    Node *cat = node_new(OP_CAT);
    if (cat == NULL) {
        return NULL;
    }
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        Node *atom = parse_atom(p);
        if (atom != NULL) {
            atom = parse_quantifier(p, atom);
        }
        if (atom == NULL || node_add(cat, atom) < 0) {
            node_free(cat);
            return NULL;
        }
    }
    return cat;
}

static Node *
parse_alt(Parser *p)
{
    Node *alt = node_new(OP_ALT);
    if (alt == NULL) {
        return NULL;
    }
    for (;;) {
        Node *seq = parse_seq(p);
        if (seq == NULL || node_add(alt, seq) < 0) {
            node_free(alt);
            return NULL;
        }
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        return alt;
    }
}

/* The NFA: byte states (a byte set and one successor), split states (any
 * number of epsilon successors) and one match state.  Built back to front:
 * build(node, next) returns the entry of `node` followed by state `next`. */
/* Growable int array. */
typedef struct {
    int *v;
    Py_ssize_t n, cap;
} IntVec;

static int
intvec_push(IntVec *vec, int x)
{
    if (vec->n == vec->cap) {
        Py_ssize_t cap = vec->cap ? vec->cap * 2 : 64;
        int *v = PyMem_Realloc(vec->v, (size_t)cap * sizeof(int));
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        vec->v = v;
        vec->cap = cap;
    }
    vec->v[vec->n++] = x;
    return 0;
}

enum { ST_BYTE, ST_SPLIT, ST_MATCH };

typedef struct {
    int kind;
    int out;                /* ST_BYTE: the successor */
    int set;                /* ST_BYTE: index into NFA.sets */
    IntVec outs;            /* ST_SPLIT: the successors */
} NState;

typedef struct {
    NState *st;
    int n, cap;
    uint8_t (*sets)[32];
    int nsets, setcap;
} NFA;

static void
nfa_clear(NFA *nfa)
{
    for (int i = 0; i < nfa->n; i++) {
        PyMem_Free(nfa->st[i].outs.v);
    }
    PyMem_Free(nfa->st);
    PyMem_Free(nfa->sets);
    memset(nfa, 0, sizeof(*nfa));
}

static int
nfa_state(NFA *nfa, int kind)
{
    if (nfa->n == nfa->cap) {
        int cap = nfa->cap ? nfa->cap * 2 : 256;
        if (cap > 10 * MAX_DFA_STATES) {
            PyErr_SetString(PyExc_ValueError, "rule fragments too large for _fastreduce");
            return -1;
        }
        NState *st = PyMem_Realloc(nfa->st, (size_t)cap * sizeof(NState));
        if (st == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        nfa->st = st;
        nfa->cap = cap;
    }
    memset(&nfa->st[nfa->n], 0, sizeof(NState));
    nfa->st[nfa->n].kind = kind;
    nfa->st[nfa->n].out = -1;
    return nfa->n++;
}

static int
nfa_add_out(NFA *nfa, int state, int out)
{
    return intvec_push(&nfa->st[state].outs, out);
}

static int
nfa_byte(NFA *nfa, const uint8_t *set, int next)
{
    if (nfa->nsets == nfa->setcap) {
        int cap = nfa->setcap ? nfa->setcap * 2 : 256;
        uint8_t (*sets)[32] = PyMem_Realloc(nfa->sets, (size_t)cap * 32);
        if (sets == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        nfa->sets = sets;
        nfa->setcap = cap;
    }
    int state = nfa_state(nfa, ST_BYTE);
    if (state < 0) {
        return -1;
    }
    memcpy(nfa->sets[nfa->nsets], set, 32);
    nfa->st[state].set = nfa->nsets++;
    nfa->st[state].out = next;
    return state;
}

/* A split state with the two successors `a` and `b`. */
static int
nfa_split2(NFA *nfa, int a, int b)
{
    int state = nfa_state(nfa, ST_SPLIT);
    if (state < 0 || nfa_add_out(nfa, state, a) < 0 || nfa_add_out(nfa, state, b) < 0) {
        return -1;
    }
    return state;
}

static int
nfa_build(NFA *nfa, const Node *node, int next)
{
    int i, cur, state, body;
    switch (node->op) {
    case OP_SET:
        return nfa_byte(nfa, node->set, next);
    case OP_CAT:
        cur = next;
        for (i = node->nkids - 1; i >= 0 && cur >= 0; i--) {
            cur = nfa_build(nfa, node->kids[i], cur);
        }
        return cur;
    case OP_ALT:
        state = nfa_state(nfa, ST_SPLIT);
        for (i = 0; i < node->nkids && state >= 0; i++) {
            body = nfa_build(nfa, node->kids[i], next);
            if (body < 0 || nfa_add_out(nfa, state, body) < 0) {
                return -1;
            }
        }
        return state;
    case OP_REP:
        if (node->max < 0) {
            /* x*: a loop state that either runs x and comes back, or leaves */
            cur = nfa_state(nfa, ST_SPLIT);
            if (cur < 0 || (body = nfa_build(nfa, node->kids[0], cur)) < 0
                    || nfa_add_out(nfa, cur, body) < 0 || nfa_add_out(nfa, cur, next) < 0) {
                return -1;
            }
        }
        else {
            /* x{0,k}: k nested optional copies, each of which may leave to `next` */
            cur = next;
            for (i = 0; i < node->max - node->min; i++) {
                if ((body = nfa_build(nfa, node->kids[0], cur)) < 0
                        || (cur = nfa_split2(nfa, body, next)) < 0) {
                    return -1;
                }
            }
        }
        for (i = 0; i < node->min && cur >= 0; i++) {
            cur = nfa_build(nfa, node->kids[0], cur);
        }
        return cur;
    }
    return -1;
}

/* The DFA the fragments compile to.  Bytes that no fragment tells apart share
 * a class; trans[state * nclasses + class] is the next state; state 0 is dead.
 * Sixteen-bit states keep the table small enough to stay in cache. */
typedef struct {
    uint16_t *trans;
    uint8_t *accept;
    int nstates, nclasses, start;
    uint8_t cls[256];
    uint8_t starts[256];    /* a match can begin with this byte */
} DFA;

static void
dfa_clear(DFA *dfa)
{
    PyMem_Free(dfa->trans);
    PyMem_Free(dfa->accept);
    memset(dfa, 0, sizeof(*dfa));
}

static int
int_compare(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The state of the subset construction. */
typedef struct {
    NFA *nfa;
    int *mark;              /* per NFA state: the generation that saw it */
    int gen;
    IntVec stack, key;      /* DFS stack; the key being built */
    IntVec pool;            /* all keys, back to back */
    Py_ssize_t *key_off;    /* per DFA state: its key in `pool` */
    int *key_len;
    int *slots;             /* hash table of DFA ids, -1 when empty */
    Py_ssize_t nslots;
    int ndfa, dfacap;
} Builder;

static uint64_t
key_hash(const int *key, int len)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < len; i++) {
        h = (h ^ (uint32_t)key[i]) * 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

/* Fills b->key with the epsilon closure of the states on b->stack: the match
 * flag first, then the sorted byte states. */
static int
closure(Builder *b)
{
    int accept = 0;
    b->gen++;
    b->key.n = 0;
    if (intvec_push(&b->key, 0) < 0) {
        return -1;
    }
    while (b->stack.n > 0) {
        int s = b->stack.v[--b->stack.n];
        if (b->mark[s] == b->gen) {
            continue;
        }
        b->mark[s] = b->gen;
        const NState *st = &b->nfa->st[s];
        if (st->kind == ST_MATCH) {
            accept = 1;
        }
        else if (st->kind == ST_BYTE) {
            if (intvec_push(&b->key, s) < 0) {
                return -1;
            }
        }
        else {
            for (Py_ssize_t i = st->outs.n - 1; i >= 0; i--) {
                if (intvec_push(&b->stack, st->outs.v[i]) < 0) {
                    return -1;
                }
            }
        }
    }
    b->key.v[0] = accept;
    qsort(b->key.v + 1, (size_t)(b->key.n - 1), sizeof(int), int_compare);
    return 0;
}

static int
builder_rehash(Builder *b, Py_ssize_t nslots)
{
    int *slots = PyMem_Malloc((size_t)nslots * sizeof(int));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < nslots; i++) {
        slots[i] = -1;
    }
    for (int id = 0; id < b->ndfa; id++) {
        uint64_t h = key_hash(b->pool.v + b->key_off[id], b->key_len[id]);
        Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(nslots - 1));
        while (slots[i] >= 0) {
            i = (i + 1) & (nslots - 1);
        }
        slots[i] = id;
    }
    PyMem_Free(b->slots);
    b->slots = slots;
    b->nslots = nslots;
    return 0;
}

/* The DFA id of b->key, adding a state when it is new; -1 on error. */
static int
builder_intern(Builder *b, DFA *dfa)
{
    const int *key = b->key.v;
    int len = (int)b->key.n;
    uint64_t h = key_hash(key, len);
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(b->nslots - 1));
    for (; b->slots[i] >= 0; i = (i + 1) & (b->nslots - 1)) {
        int id = b->slots[i];
        if (b->key_len[id] == len
                && memcmp(b->pool.v + b->key_off[id], key, (size_t)len * sizeof(int)) == 0) {
            return id;
        }
    }
    if (b->ndfa >= MAX_DFA_STATES) {
        PyErr_SetString(PyExc_ValueError, "rule fragments need too many DFA states");
        return -1;
    }
    if (b->ndfa == b->dfacap) {
        int cap = b->dfacap ? b->dfacap * 2 : 1024;
        Py_ssize_t *key_off = PyMem_Realloc(b->key_off, (size_t)cap * sizeof(Py_ssize_t));
        if (key_off == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->key_off = key_off;
        int *key_len = PyMem_Realloc(b->key_len, (size_t)cap * sizeof(int));
        if (key_len == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->key_len = key_len;
        uint16_t *trans = PyMem_Realloc(dfa->trans,
                                        (size_t)cap * (size_t)dfa->nclasses * sizeof(uint16_t));
        if (trans == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        dfa->trans = trans;
        uint8_t *accept = PyMem_Realloc(dfa->accept, (size_t)cap);
        if (accept == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        dfa->accept = accept;
        b->dfacap = cap;
    }
    int id = b->ndfa;
    b->key_off[id] = b->pool.n;
    b->key_len[id] = len;
    for (int k = 0; k < len; k++) {
        if (intvec_push(&b->pool, key[k]) < 0) {
            return -1;
        }
    }
    dfa->accept[id] = (uint8_t)key[0];
    b->slots[i] = id;
    b->ndfa++;
    if (2 * (Py_ssize_t)b->ndfa > b->nslots && builder_rehash(b, b->nslots * 2) < 0) {
        return -1;
    }
    return id;
}

/* Byte classes: two bytes share a class when every byte set treats them alike. */
static void
byte_classes(const NFA *nfa, DFA *dfa)
{
    uint8_t cls[256];
    int map[512], ncls = 1;
    memset(cls, 0, sizeof(cls));
    for (int s = 0; s < nfa->nsets; s++) {
        int next = 0;
        for (int i = 0; i < 2 * ncls; i++) {
            map[i] = -1;
        }
        for (int b = 0; b < 256; b++) {
            int key = cls[b] * 2 + set_has(nfa->sets[s], (unsigned)b);
            if (map[key] < 0) {
                map[key] = next++;
            }
            cls[b] = (uint8_t)map[key];
        }
        ncls = next;
    }
    memcpy(dfa->cls, cls, sizeof(cls));
    dfa->nclasses = ncls;
}

static int
dfa_build(NFA *nfa, int root, DFA *dfa)
{
    Builder b;
    uint8_t rep[256];
    int ok = -1;
    memset(&b, 0, sizeof(b));
    b.nfa = nfa;
    byte_classes(nfa, dfa);
    for (int c = 255; c >= 0; c--) {
        rep[dfa->cls[c]] = (uint8_t)c;
    }
    b.mark = PyMem_Calloc((size_t)nfa->n, sizeof(int));
    if (b.mark == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (builder_rehash(&b, 2048) < 0) {
        goto done;
    }
    /* state 0: dead (the empty set); state 1: the start */
    if (closure(&b) < 0 || builder_intern(&b, dfa) != 0) {
        goto done;
    }
    if (intvec_push(&b.stack, root) < 0 || closure(&b) < 0
            || (dfa->start = builder_intern(&b, dfa)) < 0) {
        goto done;
    }
    for (int id = 0; id < b.ndfa; id++) {
        for (int k = 0; k < dfa->nclasses; k++) {
            const int *key = b.pool.v + b.key_off[id];
            int len = b.key_len[id];
            b.stack.n = 0;
            for (int j = 1; j < len; j++) {
                const NState *st = &nfa->st[key[j]];
                if (set_has(nfa->sets[st->set], rep[k])
                        && intvec_push(&b.stack, st->out) < 0) {
                    goto done;
                }
            }
            int target;
            if (closure(&b) < 0 || (target = builder_intern(&b, dfa)) < 0) {
                goto done;
            }
            dfa->trans[(Py_ssize_t)id * dfa->nclasses + k] = (uint16_t)target;
        }
    }
    dfa->nstates = b.ndfa;
    for (int c = 0; c < 256; c++) {
        dfa->starts[c] = dfa->trans[(Py_ssize_t)dfa->start * dfa->nclasses + dfa->cls[c]] != 0;
    }
    ok = 0;
done:
    PyMem_Free(b.mark);
    PyMem_Free(b.stack.v);
    PyMem_Free(b.key.v);
    PyMem_Free(b.pool.v);
    PyMem_Free(b.key_off);
    PyMem_Free(b.key_len);
    PyMem_Free(b.slots);
    return ok;
}


/* ------------------------------------------------------------------------ */
/* Configuration: the compiled fragments and the abbreviations                */
/* ------------------------------------------------------------------------ */

typedef struct {
    char text[ABBREVIATION_WINDOW + 1];
    int len;
} Abbreviation;

typedef struct {
    DFA dfa;
    Abbreviation *abbr;     /* sorted; only those a 16-character window can hold */
    Py_ssize_t nabbr;
    /* A fragment holds a Greek letter that shares its UTF-8 lead byte with
     * sigma: str.lower()'s final-sigma rule could then change a match, so texts
     * with a capital sigma go to the Python path. */
    int sigma_sensitive;
    PyObject *fragments;    /* tuple of str: what the DFA was built from */
    PyObject *abbreviations;    /* frozenset of str */
} Config;

static Config *config = NULL;

static void
config_free(Config *cfg)
{
    if (cfg == NULL) {
        return;
    }
    dfa_clear(&cfg->dfa);
    PyMem_Free(cfg->abbr);
    Py_XDECREF(cfg->fragments);
    Py_XDECREF(cfg->abbreviations);
    PyMem_Free(cfg);
}

static int
abbreviation_compare(const void *a, const void *b)
{
    const Abbreviation *x = a, *y = b;
    int len = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->text, y->text, (size_t)len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Compiles every fragment into one DFA: the root splits into all of them. */
static int
compile_fragments(Config *cfg, PyObject *fragments)
{
    NFA nfa;
    int ok = -1;
    memset(&nfa, 0, sizeof(nfa));
    int match = nfa_state(&nfa, ST_MATCH);
    int root = nfa_state(&nfa, ST_SPLIT);
    if (match < 0 || root < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fragments); i++) {
        PyObject *item = PyTuple_GET_ITEM(fragments, i);
        if (!PyUnicode_Check(item) || PyUnicode_GET_LENGTH(item) == 0) {
            PyErr_SetString(PyExc_TypeError, "rule fragments must be non-empty str");
            goto done;
        }
        Py_UCS4 *chars = PyUnicode_AsUCS4Copy(item);
        if (chars == NULL) {
            goto done;
        }
        Parser p = {chars, PyUnicode_GET_LENGTH(item), 0, 0, item};
        Node *tree = parse_alt(&p);
        if (tree != NULL && p.i < p.n) {
            node_free(tree);
            tree = parse_error(&p, "unbalanced )");
        }
        for (Py_ssize_t k = 0; k < p.n; k++) {
            if (chars[k] >= 0x380 && chars[k] < 0x400) {
                cfg->sigma_sensitive = 1;   /* lead bytes 0xCE, 0xCF */
            }
        }
        PyMem_Free(chars);
        if (tree == NULL) {
            goto done;
        }
        int entry = nfa_build(&nfa, tree, match);
        node_free(tree);
        if (entry < 0 || nfa_add_out(&nfa, root, entry) < 0) {
            goto done;
        }
    }
    if (dfa_build(&nfa, root, &cfg->dfa) < 0) {
        goto done;
    }
    if (cfg->dfa.accept[cfg->dfa.start]) {
        PyErr_SetString(PyExc_ValueError, "a rule fragment matches the empty string");
        goto done;
    }
    ok = 0;
done:
    nfa_clear(&nfa);
    return ok;
}

static int
load_abbreviations(Config *cfg, PyObject *abbreviations)
{
    Py_ssize_t n = PySet_GET_SIZE(abbreviations);
    PyObject *iter, *item;
    cfg->abbr = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Abbreviation));
    if (cfg->abbr == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    iter = PyObject_GetIter(abbreviations);
    if (iter == NULL) {
        return -1;
    }
    while ((item = PyIter_Next(iter)) != NULL) {
        if (!PyUnicode_Check(item) || !PyUnicode_IS_ASCII(item)) {
            PyErr_Format(PyExc_ValueError, "abbreviation %R is not an ASCII str", item);
            Py_DECREF(item);
            Py_DECREF(iter);
            return -1;
        }
        Py_ssize_t len = PyUnicode_GET_LENGTH(item);
        if (len <= ABBREVIATION_WINDOW && cfg->nabbr < n) {
            /* longer ones are longer than any word the window holds */
            Abbreviation *a = &cfg->abbr[cfg->nabbr++];
            memcpy(a->text, PyUnicode_1BYTE_DATA(item), (size_t)len);
            a->len = (int)len;
        }
        Py_DECREF(item);
    }
    Py_DECREF(iter);
    if (PyErr_Occurred()) {
        return -1;
    }
    qsort(cfg->abbr, (size_t)cfg->nabbr, sizeof(Abbreviation), abbreviation_compare);
    return 0;
}


/* ------------------------------------------------------------------------ */
/* One reduction: buffers and the text being reduced                          */
/* ------------------------------------------------------------------------ */

typedef struct {
    Py_ssize_t start, end;
} Span;

typedef struct {
    Span *v;
    Py_ssize_t n, cap;
} SpanVec;

static int
spanvec_push(SpanVec *vec, Py_ssize_t start, Py_ssize_t end)
{
    if (vec->n == vec->cap) {
        Py_ssize_t cap = vec->cap ? vec->cap * 2 : 64;
        Span *v = PyMem_Realloc(vec->v, (size_t)cap * sizeof(Span));
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        vec->v = v;
        vec->cap = cap;
    }
    vec->v[vec->n].start = start;
    vec->v[vec->n].end = end;
    vec->n++;
    return 0;
}

typedef struct {
    const Config *cfg;
    Py_UCS4 *t;             /* the current text */
    Py_ssize_t n, tcap;
    Py_UCS4 *out;           /* the next text, being written */
    Py_ssize_t nout, outcap;
    SpanVec units;
    int has_openers;        /* the current text holds a ` " or “ */
} Work;

static void
work_clear(Work *w)
{
    PyMem_Free(w->t);
    PyMem_Free(w->out);
    PyMem_Free(w->units.v);
}

static int
out_reserve(Work *w, Py_ssize_t more)
{
    if (w->nout + more <= w->outcap) {
        return 0;
    }
    Py_ssize_t cap = w->outcap * 2;
    if (cap < w->nout + more) {
        cap = w->nout + more;
    }
    if ((size_t)cap > PY_SSIZE_T_MAX / sizeof(Py_UCS4)) {
        PyErr_NoMemory();
        return -1;
    }
    Py_UCS4 *out = PyMem_Realloc(w->out, (size_t)cap * sizeof(Py_UCS4));
    if (out == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->out = out;
    w->outcap = cap;
    return 0;
}

static int
out_append(Work *w, const Py_UCS4 *chars, Py_ssize_t len)
{
    if (out_reserve(w, len) < 0) {
        return -1;
    }
    memcpy(w->out + w->nout, chars, (size_t)len * sizeof(Py_UCS4));
    w->nout += len;
    return 0;
}

static int
out_char(Work *w, Py_UCS4 c)
{
    return out_append(w, &c, 1);
}


/* ------------------------------------------------------------------------ */
/* describe.fold                                                              */
/* ------------------------------------------------------------------------ */

/* describe._LIST_MARKER.match(text, p), on a text of any width:
 * (?:[-*+•▪‣◦]|\(?(?:\d{1,3}|[a-z]|[ivx]{1,4})[.)])(?=\s|\Z) */
static int
list_marker_at(int kind, const void *data, Py_ssize_t n, Py_ssize_t p)
{
    if (p >= n) {
        return 0;
    }
    Py_UCS4 c = PyUnicode_READ(kind, data, p);
    if (c == '-' || c == '*' || c == '+' || c == 0x2022 || c == 0x25AA || c == 0x2023
            || c == 0x25E6) {
        return p + 1 == n || Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, p + 1));
    }
    Py_ssize_t q = p + (c == '(');
    /* the token is all the characters before [.)]: try each length the
     * alternatives allow (a backtracking engine would find the same ones) */
    int digits = 1, roman = 1;
    for (Py_ssize_t k = 1; k <= 4 && q + k < n; k++) {
        Py_UCS4 last = PyUnicode_READ(kind, data, q + k - 1);
        digits = digits && k <= 3 && Py_UNICODE_ISDECIMAL(last);
        roman = roman && (last == 'i' || last == 'v' || last == 'x');
        int letter = k == 1 && last >= 'a' && last <= 'z';
        if (!digits && !roman && !letter) {
            return 0;
        }
        Py_UCS4 close = PyUnicode_READ(kind, data, q + k);
        if ((close == '.' || close == ')')
                && (q + k + 1 == n || Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, q + k + 1)))) {
            return 1;
        }
    }
    return 0;
}

/* Does the line whose first character other than white space is data[p] open
 * with what markup.MARKUP looks for there: ``` ~~~ # or "<" and a letter or "/"? */
static inline Py_ALWAYS_INLINE int
opens_markup(int kind, const void *data, Py_ssize_t n, Py_ssize_t p)
{
    Py_UCS4 c = PyUnicode_READ(kind, data, p);
    if (c == '#') {
        return 1;
    }
    if (c == '`' || c == '~') {
        return p + 2 < n && PyUnicode_READ(kind, data, p + 1) == c
               && PyUnicode_READ(kind, data, p + 2) == c;
    }
    if (c == '<' && p + 1 < n) {
        Py_UCS4 d = PyUnicode_READ(kind, data, p + 1);
        return d == '/' || (d < 0x80 && Py_ISALPHA(d));
    }
    return 0;
}

/* describe.fold of data[0:n] (a str of the given kind), written to t as UCS4.
 * Returns the folded length, the text then starting at t[*start]; or -1 when
 * the text holds something left to Python: a surrogate, a capital sigma when
 * `sigma`, or a line that opens with markup (markup.MARKUP's first branch; the
 * caller checks its second, "</" and a letter).  Inlined once per kind, so each
 * reads its own width. */
static inline Py_ALWAYS_INLINE Py_ssize_t
fold_text(int kind, const void *data, Py_ssize_t n, Py_UCS4 *t, int sigma, Py_ssize_t *start)
{
    Py_ssize_t r = 0, w = 0;
    if (n > 0 && !Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, 0)) && opens_markup(kind, data, n, 0)) {
        return -1;
    }
    while (r < n) {
        Py_UCS4 c = PyUnicode_READ(kind, data, r);
        if (c > ' ' && c < 0x7F) {
            t[w++] = c;     /* the common case: printable ASCII */
            r++;
            continue;
        }
        if (!Py_UNICODE_ISSPACE(c)) {
            if (kind != PyUnicode_1BYTE_KIND
                    && ((c >= 0xD800 && c <= 0xDFFF) || (sigma && c == 0x3A3))) {
                return -1;
            }
            t[w++] = c;
            r++;
            continue;
        }
        /* a maximal run of white space: _FOLDABLE matches it unless it is one " " */
        Py_ssize_t j = r + 1, newlines = (c == '\n');
        while (j < n && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, j))) {
            newlines += (PyUnicode_READ(kind, data, j) == '\n');
            j++;
        }
        if ((newlines > 0 || r == 0) && j < n && opens_markup(kind, data, n, j)) {
            return -1;  /* a line start, past its white space */
        }
        if (c == ' ' && j == r + 1) {
            t[w++] = ' ';
        }
        else if (newlines == 0 || r == 0 || j == n) {
            t[w++] = ' ';
        }
        else if (newlines >= 2) {
            t[w++] = '\n';
            t[w++] = '\n';
        }
        else {
            /* a break before a list item of the original text */
            t[w++] = list_marker_at(kind, data, n, j) ? '\n' : ' ';
        }
        r = j;
    }
    /* str.strip(): only a " " can be left at either end */
    Py_ssize_t s = 0;
    while (s < w && Py_UNICODE_ISSPACE(t[s])) {
        s++;
    }
    while (w > s && Py_UNICODE_ISSPACE(t[w - 1])) {
        w--;
    }
    *start = s;
    return w - s;
}

/* describe._is_short */
static int
is_short(const Py_UCS4 *t, Py_ssize_t n, Py_ssize_t short_bytes)
{
    if (n <= short_bytes / 4) {
        return 1;
    }
    Py_ssize_t bytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        bytes += utf8_len(t[i]);
        if (bytes > short_bytes) {
            return 0;
        }
    }
    return 1;
}


/* ------------------------------------------------------------------------ */
/* describe.split_sentences and describe.units                               */
/* ------------------------------------------------------------------------ */

/* Flags of the ASCII characters the scans stop at (set up by init_flags). */
enum {
    CH_WORD = 0x01,         /* [0-9A-Za-z_]: RE2's \w */
    CH_SIGNAL = 0x02,       /* can open a _SIGNAL match: * < > A-Z */
    CH_NEWLINE = 0x04,
    CH_TERMINAL = 0x08,     /* . ! ? */
    CH_OPENER = 0x10,       /* ` " : can open a protected span */
};
static uint8_t ascii_flags[128];

static void
init_flags(void)
{
    for (unsigned c = 0; c < 128; c++) {
        uint8_t f = 0;
        if (is_word_byte(c)) f |= CH_WORD;
        if (c == '*' || c == '<' || c == '>' || (c >= 'A' && c <= 'Z')) f |= CH_SIGNAL;
        if (c == '\n') f |= CH_NEWLINE;
        if (c == '.' || c == '!' || c == '?') f |= CH_TERMINAL;
        if (c == '`' || c == '"') f |= CH_OPENER;
        ascii_flags[c] = f;
    }
}

/* The spans of describe._protected (_SPANS.finditer), found as the sentence
 * scan passes them:  `[^`\n]{1,400}` | "[^"\n]{1,300}" | “[^”\n]{1,300}”
 * A span opened at p ends at the first closer or line break after p; those
 * "next stop" positions only move forward with p, so each kind keeps a cursor. */
typedef struct {
    Py_ssize_t next;        /* where finditer tries next */
    Py_ssize_t stop[3];     /* per kind: the first closer or break after the last try */
    Span last;              /* the last span found; start < 0 before the first */
} SpanFinder;

/* Tries a span at p, an opener at or after f->next. */
static void
span_try(Work *w, SpanFinder *f, Py_ssize_t p)
{
    static const Py_UCS4 closers[3] = {'`', '"', 0x201D};
    static const Py_ssize_t longest[3] = {400, 300, 300};
    const Py_UCS4 *t = w->t;
    Py_ssize_t n = w->n;
    Py_UCS4 c = t[p];
    int kind = c == '`' ? 0 : c == '"' ? 1 : 2;
    if (f->stop[kind] <= p) {
        Py_ssize_t q = p + 1;
        while (q < n && t[q] != closers[kind] && t[q] != '\n') {
            q++;
        }
        f->stop[kind] = q;
    }
    Py_ssize_t q = f->stop[kind], inner = q - p - 1;
    if (q < n && t[q] == closers[kind] && inner >= 1 && inner <= longest[kind]) {
        f->last.start = p;
        f->last.end = q + 1;
        f->next = q + 1;
    }
    else {
        f->next = p + 1;
    }
}

/* Is t[0:len] (its first character replaced by `first` if first != 0) one of
 * the configured abbreviations? */
static int
is_listed(const Config *cfg, const Py_UCS4 *t, Py_ssize_t len, Py_UCS4 first)
{
    Abbreviation key;
    if (len > ABBREVIATION_WINDOW) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_UCS4 c = (i == 0 && first) ? first : t[i];
        if (c >= 128) {
            return 0;   /* every abbreviation is ASCII */
        }
        key.text[i] = (char)c;
    }
    key.len = (int)len;
    return bsearch(&key, cfg->abbr, (size_t)cfg->nabbr, sizeof(Abbreviation),
                   abbreviation_compare) != NULL;
}

/* describe._is_abbreviation: does the period at `dot` close "e.g", "etc", "Mr",
 * an initial ("J.") or a list number ("1.")? */
static int
is_abbreviation(const Config *cfg, const Py_UCS4 *t, Py_ssize_t dot)
{
    Py_ssize_t window = dot > ABBREVIATION_WINDOW ? dot - ABBREVIATION_WINDOW : 0;
    Py_ssize_t start = window;
    for (Py_ssize_t q = dot - 1; q >= window; q--) {
        if (t[q] == ' ' || t[q] == '\n') {
            start = q + 1;
            break;
        }
    }
    while (start < dot && is_opener(t[start])) {
        start++;
    }
    const Py_UCS4 *word = t + start;
    Py_ssize_t len = dot - start;
    if (len == 1) {
        return Py_UNICODE_ISALPHA(word[0]) || Py_UNICODE_ISDIGIT(word[0]);
    }
    if (len > 0) {
        Py_ssize_t i = 0;
        while (i < len && Py_UNICODE_ISDIGIT(word[i])) {
            i++;
        }
        if (i == len) {
            return len == 2;
        }
    }
    if (is_listed(cfg, word, len, 0)) {
        return 1;
    }
    /* word[:1].lower() + word[1:]: U+0130 lowers to two characters, one of them
     * not ASCII, so that word is not listed */
    if (len > 0 && Py_UNICODE_ISUPPER(word[0]) && word[0] != 0x130) {
        return is_listed(cfg, word, len, Py_UNICODE_TOLOWER(word[0]));
    }
    return 0;
}

/* describe._ends_sentence: the unit ends in terminal punctuation, perhaps
 * followed by closers (looking at its last 16 characters only). */
static int
ends_sentence(const Py_UCS4 *t, Span unit)
{
    Py_ssize_t lo = unit.end - 16 > unit.start ? unit.end - 16 : unit.start;
    Py_ssize_t e = unit.end;
    while (e > lo && is_closer(t[e - 1])) {
        e--;
    }
    return e > lo && is_terminal(t[e - 1]);
}

/* Adds sentence [start, end) to w->units: glued as describe.units does when
 * `glue`, else as it is (describe.split_sentences). */
static int
add_sentence(Work *w, Py_ssize_t start, Py_ssize_t end, int glue, int *in_item)
{
    const Py_UCS4 *t = w->t;
    SpanVec *units = &w->units;
    if (!glue) {
        return spanvec_push(units, start, end);
    }
    if (units->n > 0) {
        /* text[s.start - 1]: start is never 0 once a unit exists */
        int same_line = t[start > 0 ? start - 1 : w->n - 1] != '\n';
        Span *last = &units->v[units->n - 1];
        if ((!same_line && !ends_sentence(t, *last)) || (same_line && *in_item)) {
            last->end = end;
            if (!same_line && list_marker_at(PyUnicode_4BYTE_KIND, t, w->n, start)) {
                *in_item = 1;   /* an item the unit runs into: its sentences stay with it */
            }
            return 0;
        }
    }
    if (spanvec_push(units, start, end) < 0) {
        return -1;
    }
    *in_item = list_marker_at(PyUnicode_4BYTE_KIND, t, w->n, start);
    return 0;
}

/* describe._runs_into_list: a line of the unit (not its first) opens with a list marker */
static int
runs_into_list(const Py_UCS4 *t, Py_ssize_t n, Span unit)
{
    for (Py_ssize_t i = unit.start; i < unit.end; i++) {
        if (t[i] == '\n' && list_marker_at(PyUnicode_4BYTE_KIND, t, n, i + 1)) {
            return 1;
        }
    }
    return 0;
}

/* describe.split_sentences glued by describe.units (`glue`), or the sentences
 * alone (!glue: what split_sentences() exports), into w->units, in one scan:
 * the candidate ends come in text order, as _ends() sorts them, and the
 * protected spans are found on the way.  Sets w->has_openers. */
static int
find_units(Work *w, int glue)
{
    const Py_UCS4 *t = w->t;
    Py_ssize_t n = w->n, begin = 0;
    SpanFinder spans = {0, {-1, -1, -1}, {-1, -1}};
    int in_item = 0;
    w->units.n = 0;
    w->has_openers = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = t[i];
        Py_ssize_t cut;
        int flags = c < 128 ? ascii_flags[c]
                    : c == ELLIPSIS ? CH_TERMINAL : c == 0x201C ? CH_OPENER : 0;
        if (!(flags & (CH_NEWLINE | CH_TERMINAL | CH_OPENER))) {
            continue;
        }
        if (flags & CH_OPENER) {
            w->has_openers = 1;
            if (i >= spans.next) {
                span_try(w, &spans, i);
            }
            continue;
        }
        if (flags & CH_NEWLINE) {
            if (i > 0 && t[i - 1] == '\n') {
                continue;   /* one break per run of line breaks */
            }
            cut = i;
        }
        else {
            /* _END_ASCII / _END_ELLIPSIS: [.!?…](?=[closers]{0,2} \S) */
            Py_ssize_t end = i + 1;
            while (end < n && end - i <= 3 && is_closer(t[end])) {
                end++;
            }
            if (end - i > 3 || end + 1 >= n || t[end] != ' ' || Py_UNICODE_ISSPACE(t[end + 1])) {
                continue;
            }
            if (end < begin || Py_UNICODE_ISLOWER(t[end + 1])) {
                continue;   /* "approx. five", "fast. slow" */
            }
            if (c == '.' && is_abbreviation(w->cfg, t, i)) {
                continue;
            }
            /* _inside: the last span starting at or before i holds it (the
             * finder has tried every opener before i: i is no opener) */
            if (spans.last.start >= 0 && spans.last.start < i && i < spans.last.end) {
                continue;
            }
            cut = end;
        }
        if (cut > begin && add_sentence(w, begin, cut, glue, &in_item) < 0) {
            return -1;
        }
        begin = cut;
        while (begin < n && (t[begin] == ' ' || t[begin] == '\n')) {
            begin++;
        }
    }
    if (begin < n && add_sentence(w, begin, n, glue, &in_item) < 0) {
        return -1;
    }
    return 0;
}


/* ------------------------------------------------------------------------ */
/* Which units state a rule (rules.RuleScan.states_rule, opens_with_instruction) */
/* ------------------------------------------------------------------------ */

/* Runs the DFA from character k (a boundary between a word and a non-word
 * byte) on the lower-cased UTF-8 of t[k:e]: is there a match ending at a word
 * boundary at or before e?  The boundary after a match looks at the text
 * beyond e, as RE2 does with a span of a larger text. */
static int
dfa_run(const DFA *dfa, const Py_UCS4 *t, Py_ssize_t n, Py_ssize_t k, Py_ssize_t e)
{
    const uint16_t *trans = dfa->trans;
    const uint8_t *cls = dfa->cls;
    Py_ssize_t ncls = dfa->nclasses;
    Py_ssize_t st = dfa->start;
    for (Py_ssize_t j = k; j < e; j++) {
        Py_UCS4 c = lower_char(t[j]);
        int last_word;
        if (c < 128) {
            st = trans[st * ncls + cls[c]];
            if (st == 0) {
                return 0;
            }
            last_word = is_word_byte(c);
        }
        else {
            uint8_t bytes[4];
            int len = utf8_encode(c, bytes);
            for (int b = 0; b < len; b++) {
                st = trans[st * ncls + cls[bytes[b]]];
                if (st == 0) {
                    return 0;
                }
                /* inside a character both neighbours are non-word bytes: no \b */
            }
            last_word = 0;
        }
        if (dfa->accept[st]) {
            int next_word = j + 1 < n && is_word_byte(lower_char(t[j + 1]));
            if (last_word != next_word) {
                return 1;
            }
        }
    }
    return 0;
}

/* One of the words the shouted-word branch of _SIGNAL looks for after a space,
 * followed by \b. */
static int
shout_follower_at(const Py_UCS4 *t, Py_ssize_t n, Py_ssize_t p)
{
    static const struct { const char *text; Py_ssize_t len; } words[] = {
        {"use", 3}, {"call", 4}, {"do", 2}, {"the", 3}, {"this", 4}, {"must", 4}, {"be", 2},
    };
    for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
        Py_ssize_t len = words[w].len, i = 0;
        if (p + len > n) {
            continue;
        }
        while (i < len && t[p + i] == (Py_UCS4)(unsigned char)words[w].text[i]) {
            i++;
        }
        if (i == len && (p + len == n || !is_word_uni(t[p + len]))) {
            return 1;
        }
    }
    return 0;
}

/* The non-ASCII characters that can open a _SIGNAL match. */
static inline int
is_signal_glyph(Py_UCS4 c)
{
    return c == 0x26A0 || c == 0x2757 || c == 0x203C || c == 0x1F6A8 || c == 0x26D4
           || c == 0x1F6D1 || c == 0x2264 || c == 0x2265;
}

/* Does rules._SIGNAL match at p (with the whole text as context)?
 *   [⚠❗‼🚨⛔🛑]
 *   | \*(?<=\w\*)(?=[\s,;)]|$)
 *   | [<>≤≥]=? ?\d
 *   | [A-Z](?<![\w][A-Z])[A-Z]{2,}(?!\w)(?=[:!]| (?:use|call|do|the|this|must|be)\b)
 * Every match is one character, a comparison, or a whole run of capitals, and
 * no match can start inside another, so finditer's starts are exactly the
 * positions where a match is possible. */
static int
signal_at(const Py_UCS4 *t, Py_ssize_t n, Py_ssize_t p)
{
    Py_UCS4 c = t[p];
    Py_ssize_t q;
    switch (c) {
    case 0x26A0: case 0x2757: case 0x203C: case 0x1F6A8: case 0x26D4: case 0x1F6D1:
        return 1;
    case '*':
        if (p == 0 || !is_word_uni(t[p - 1])) {
            return 0;
        }
        /* $ also matches before a final "\n", which \s covers */
        return p + 1 == n || Py_UNICODE_ISSPACE(t[p + 1]) || t[p + 1] == ','
               || t[p + 1] == ';' || t[p + 1] == ')';
    case '<': case '>': case 0x2264: case 0x2265:
        q = p + 1;
        if (q < n && t[q] == '=') {
            q++;
        }
        if (q < n && t[q] == ' ') {
            q++;
        }
        return q < n && Py_UNICODE_ISDECIMAL(t[q]);
    default:
        break;
    }
    if (c < 'A' || c > 'Z' || (p > 0 && is_word_uni(t[p - 1]))) {
        return 0;
    }
    /* [A-Z]{2,} is greedy and (?!\w) rejects every shorter run */
    q = p + 1;
    while (q < n && t[q] >= 'A' && t[q] <= 'Z') {
        q++;
    }
    if (q - p < 3 || (q < n && is_word_uni(t[q]))) {
        return 0;
    }
    if (q < n && (t[q] == ':' || t[q] == '!')) {
        return 1;
    }
    return q < n && t[q] == ' ' && shout_follower_at(t, n, q + 1);
}

/* A verb letter under re.IGNORECASE: the character lower-cases to it, or is
 * one of the equivalents sre adds (dotless i, long s). */
static inline int
ignorecase_is(Py_UCS4 c, char letter)
{
    if (c < 128) {
        return (c | 0x20) == (Py_UCS4)letter;
    }
    return Py_UNICODE_TOLOWER(c) == (Py_UCS4)letter
           || (letter == 'i' && c == 0x131) || (letter == 's' && c == 0x17F);
}

/* rules._IMPERATIVE.match on the string t[p:limit], ignoring case:
 *   (?:[-*+•]\s*|\d{1,3}[.)]\s*)?(?:provide|specify|...|leave)\b
 * `line`: the string is one line of the unit, so \s* stops at a line break. */
static int
imperative_at(const Py_UCS4 *t, Py_ssize_t p, Py_ssize_t limit, int line)
{
    static const struct { const char *text; Py_ssize_t len; } verbs[] = {
        {"provide", 7}, {"specify", 7}, {"pass", 4}, {"set", 3}, {"supply", 6},
        {"include", 7}, {"call", 4}, {"use", 3}, {"select", 6}, {"choose", 6},
        {"omit", 4}, {"leave", 5},
    };
    Py_ssize_t q = p;
    if (q >= limit) {
        return 0;
    }
    Py_UCS4 c = t[q];
    if (c == '-' || c == '*' || c == '+' || c == 0x2022) {
        q++;
    }
    else if (Py_UNICODE_ISDECIMAL(c)) {
        /* no verb starts with a digit, so the prefix must match */
        while (q < limit && q - p < 4 && Py_UNICODE_ISDECIMAL(t[q])) {
            q++;
        }
        if (q - p > 3 || q >= limit || (t[q] != '.' && t[q] != ')')) {
            return 0;
        }
        q++;
    }
    if (q != p) {
        while (q < limit && Py_UNICODE_ISSPACE(t[q]) && !(line && t[q] == '\n')) {
            q++;
        }
    }
    for (size_t v = 0; v < sizeof(verbs) / sizeof(verbs[0]); v++) {
        Py_ssize_t len = verbs[v].len, i = 0;
        if (q + len > limit) {
            continue;
        }
        while (i < len && ignorecase_is(t[q + i], verbs[v].text[i])) {
            i++;
        }
        /* after a verb on a line, a line break is the end of that string */
        if (i == len && (q + len == limit || !is_word_uni(t[q + len]))) {
            return 1;
        }
    }
    return 0;
}

/* rules._IMPERATIVE_INSIDE at t[q:limit], the character before q being a space:
 *   (?:Provide|Specify|...|Leave)\b, case-sensitive */
static int
capitalised_imperative_at(const Py_UCS4 *t, Py_ssize_t q, Py_ssize_t limit)
{
    static const struct { const char *text; Py_ssize_t len; } verbs[] = {
        {"Provide", 7}, {"Specify", 7}, {"Pass", 4}, {"Set", 3}, {"Supply", 6},
        {"Include", 7}, {"Call", 4}, {"Use", 3}, {"Select", 6}, {"Choose", 6},
        {"Omit", 4}, {"Leave", 5},
    };
    if (q >= limit || t[q] < 'A' || t[q] > 'Z') {
        return 0;
    }
    for (size_t v = 0; v < sizeof(verbs) / sizeof(verbs[0]); v++) {
        Py_ssize_t len = verbs[v].len, i = 0;
        if (q + len > limit) {
            continue;
        }
        while (i < len && t[q + i] == (Py_UCS4)verbs[v].text[i]) {
            i++;
        }
        if (i == len && (q + len == limit || !is_word_uni(t[q + len]))) {
            return 1;
        }
    }
    return 0;
}

/* Does the unit t[s:e] state a rule?  RuleScan.states_rule (a _SIGNAL match
 * starting in it, or the RE2 alternation on its lower-cased bytes) or
 * opens_with_instruction (the unit, or a line of it after the first, opens with
 * an imperative): one scan, stopping at the first hit. */
static int
states_rule(const Config *cfg, const Py_UCS4 *t, Py_ssize_t n, Py_ssize_t s, Py_ssize_t e)
{
    const DFA *dfa = &cfg->dfa;
    if (imperative_at(t, s, e, 0)) {
        return 1;
    }
    int prev = s > 0 && is_word_byte(lower_char(t[s - 1]));
    for (Py_ssize_t k = s; k < e; k++) {
        Py_UCS4 c = t[k];
        int word;
        unsigned first;     /* the first byte of the lower-cased character */
        if (c < 128) {
            int flags = ascii_flags[c];
            if ((flags & CH_SIGNAL) && signal_at(t, n, k)) {
                return 1;
            }
            if ((flags & CH_NEWLINE) && imperative_at(t, k + 1, e, 1)) {
                return 1;
            }
            if (Py_UNICODE_ISSPACE(c) && capitalised_imperative_at(t, k + 1, e)) {
                return 1;
            }
            word = flags & CH_WORD;
            first = (c >= 'A' && c <= 'Z') ? c + 32 : c;
        }
        else {
            if (is_signal_glyph(c) && signal_at(t, n, k)) {
                return 1;
            }
            if (Py_UNICODE_ISSPACE(c) && capitalised_imperative_at(t, k + 1, e)) {
                return 1;
            }
            Py_UCS4 lowered = lower_char(c);
            uint8_t bytes[4];
            utf8_encode(lowered, bytes);
            word = is_word_byte(lowered);
            first = bytes[0];
        }
        /* \b: a match starts where word and non-word bytes meet */
        if (word != prev && dfa->starts[first] && dfa_run(dfa, t, n, k, e)) {
            return 1;
        }
        prev = word;
    }
    return 0;
}


/* ------------------------------------------------------------------------ */
/* describe._reduce_once                                                     */
/* ------------------------------------------------------------------------ */

/* describe._BULLETS: "-*+•▪‣◦ " */
static inline int
is_bullet(Py_UCS4 c)
{
    return c == '-' || c == '*' || c == '+' || c == 0x2022 || c == 0x25AA || c == 0x2023
           || c == 0x25E6 || c == ' ';
}

/* t[s:e].rstrip(_LEAD_TRAILERS).lstrip(_BULLETS) is not empty */
static int
has_word(const Py_UCS4 *t, Py_ssize_t s, Py_ssize_t e)
{
    while (e > s && is_lead_trailer(t[e - 1])) {
        e--;
    }
    while (s < e && is_bullet(t[s])) {
        s++;
    }
    return s < e;
}

/* describe.cut_lead(t[s:e], limit), appended to the output. */
static int
append_lead(Work *w, Py_ssize_t s, Py_ssize_t e, Py_ssize_t limit)
{
    const Py_UCS4 *t = w->t;
    Py_ssize_t bytes = 0, i;
    for (i = s; i < e && bytes <= limit; i++) {
        bytes += utf8_len(t[i]);
    }
    if (bytes <= limit) {
        return out_append(w, t + s, e - s);
    }
    /* the longest prefix of the first line (a lead is one line) whose UTF-8
     * fits in limit - len("…") bytes; h < e && t[h] != '\n' then says that
     * it is shorter than that line */
    Py_ssize_t budget = limit - 3, h = s;
    bytes = 0;
    while (h < e && t[h] != '\n' && bytes + utf8_len(t[h]) <= budget) {
        bytes += utf8_len(t[h]);
        h++;
    }
    if (h < e && t[h] != '\n' && !Py_UNICODE_ISSPACE(t[h])) {
        Py_ssize_t space = h - 1;   /* never end on half a word */
        while (space >= s && t[space] != ' ') {
            space--;
        }
        if (space > s && has_word(t, s, space)) {
            h = space;   /* (unless all before it is a list marker: describe.cut_lead) */
        }
    }
    while (h > s && is_lead_trailer(t[h - 1])) {
        h--;
    }
    if (out_append(w, t + s, h - s) < 0) {
        return -1;
    }
    return out_char(w, ELLIPSIS);
}

/* describe._separator before the unit at `start` */
static int
append_separator(Work *w, Py_ssize_t start)
{
    const Py_UCS4 *t = w->t;
    if (t[start - 1] != '\n') {
        return out_char(w, ' ');
    }
    if (start >= 2 && t[start - 2] == '\n') {
        return out_char(w, '\n') < 0 ? -1 : out_char(w, '\n');
    }
    return out_char(w, '\n');
}

/* One pass: the units of w->t, the rules kept whole and the first other unit
 * as the lead, into w->out. */
static int
reduce_once(Work *w, Py_ssize_t lead_bytes)
{
    const Py_UCS4 *t = w->t;
    Py_ssize_t n = w->n;
    int have_lead = 0;
    int list_kept = 0;  /* describe._choose's: the last unit kept runs into a list */
    if (find_units(w, 1) < 0) {
        return -1;
    }
    w->nout = 0;
    for (Py_ssize_t u = 0; u < w->units.n; u++) {
        Span unit = w->units.v[u];
        int rule;
        if (list_kept && unit.start > 0 && t[unit.start - 1] == '\n'
            && list_marker_at(PyUnicode_4BYTE_KIND, t, n, unit.start)) {
            rule = 1;   /* a later item of the list a kept unit runs into */
        }
        else {
            rule = states_rule(w->cfg, t, n, unit.start, unit.end);
            list_kept = rule && runs_into_list(t, n, unit);
        }
        if (!rule && have_lead) {
            continue;   /* dropped */
        }
        if (w->nout > 0 && append_separator(w, unit.start) < 0) {
            return -1;
        }
        if (rule) {
            if (out_append(w, t + unit.start, unit.end - unit.start) < 0) {
                return -1;
            }
        }
        else {
            if (append_lead(w, unit.start, unit.end, lead_bytes) < 0) {
                return -1;
            }
            have_lead = 1;
        }
    }
    return 0;
}

static int
has_span_chars(const Py_UCS4 *t, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (t[i] == '`' || t[i] == '"' || t[i] == 0x201C) {
            return 1;
        }
    }
    return 0;
}

/* markup.MARKUP's second branch: "</" and an ASCII letter anywhere.  Finding
 * "<" is a memchr on the common 1-byte text. */
static int
has_closing_tag(PyObject *text, Py_ssize_t n)
{
    const void *data = PyUnicode_DATA(text);
    int kind = PyUnicode_KIND(text);
    for (Py_ssize_t at = 0; (at = PyUnicode_FindChar(text, '<', at, n, 1)) >= 0 && at + 2 < n; at++) {
        Py_UCS4 letter = PyUnicode_READ(kind, data, at + 2);
        if (PyUnicode_READ(kind, data, at + 1) == '/' && letter < 0x80 && Py_ISALPHA(letter)) {
            return 1;
        }
    }
    return 0;
}

/* describe.fold(text) into w->t as UCS4.  Returns 1 when the text holds
 * something this module leaves to Python (a surrogate, a capital sigma when
 * that matters, markup: markup.may_hold(text), whose blocks, headings and
 * tags only the Python path keeps, or a fence anywhere), 0 when loaded, -1 on error. */
static int
load_folded(Work *w, PyObject *text)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), start, len;
    const void *data = PyUnicode_DATA(text);
    int sigma = w->cfg->sigma_sensitive;
    if (has_closing_tag(text, n)) {
        return 1;
    }
    if ((size_t)n >= PY_SSIZE_T_MAX / sizeof(Py_UCS4)) {
        PyErr_NoMemory();
        return -1;
    }
    w->t = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_UCS4));
    if (w->t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->tcap = n;
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_1BYTE_KIND:
        len = fold_text(PyUnicode_1BYTE_KIND, data, n, w->t, sigma, &start);
        break;
    case PyUnicode_2BYTE_KIND:
        len = fold_text(PyUnicode_2BYTE_KIND, data, n, w->t, sigma, &start);
        break;
    default:
        len = fold_text(PyUnicode_4BYTE_KIND, data, n, w->t, sigma, &start);
        break;
    }
    if (len < 0) {
        return 1;
    }
    if (start > 0) {
        memmove(w->t, w->t + start, (size_t)len * sizeof(Py_UCS4));
    }
    w->n = len;
    /* a fence anywhere (``` or ~~~ mid-line, which is no markup): describe._lead gives no
     * lead of a cut that opens with one and would open a block; that check is Python's */
    for (Py_ssize_t i = 0; i + 2 < len; i++) {
        Py_UCS4 c = w->t[i];
        if ((c == '`' || c == '~') && w->t[i + 1] == c && w->t[i + 2] == c) {
            return 1;
        }
    }
    return 0;
}

/* Whether fold leaves the text made (w->out) as it is: 1, 0, or -1 on error.  Only a
 * break can be folded away (the pieces are folded, joined by one space or the break
 * before them), so a text without one is folded. */
static int
folded_already(Work *w)
{
    Py_ssize_t i, start, len;
    for (i = 0; i < w->nout && w->out[i] != '\n'; i++) {
    }
    if (i == w->nout) {
        return 1;
    }
    Py_UCS4 *check = PyMem_Malloc((size_t)w->nout * sizeof(Py_UCS4));
    if (check == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    len = fold_text(PyUnicode_4BYTE_KIND, w->out, w->nout, check, w->cfg->sigma_sensitive, &start);
    int same = len == w->nout && memcmp(check + start, w->out, (size_t)len * sizeof(Py_UCS4)) == 0;
    PyMem_Free(check);
    return same;
}

/* reduce(text, short_bytes, lead_bytes): describe.explain(...).text, or None */
static PyObject *
fastreduce_reduce(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Work w;
    PyObject *result = NULL;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "reduce() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyUnicode_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "reduce() argument 1 must be str, not %.100s",
                     Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    /* out-of-range integers are clamped: a huge limit behaves like any limit
     * larger than the text */
    Py_ssize_t short_bytes = PyNumber_AsSsize_t(args[1], NULL);
    if (short_bytes == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t lead_bytes = PyNumber_AsSsize_t(args[2], NULL);
    if (lead_bytes == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (config == NULL || short_bytes < 0 || lead_bytes < 3) {
        Py_RETURN_NONE;     /* not configured, or slicing semantics left to Python */
    }
    memset(&w, 0, sizeof(w));
    w.cfg = config;
    int loaded = load_folded(&w, args[0]);
    if (loaded != 0) {
        work_clear(&w);
        if (loaded < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }

    /* explain(): keep a short folded text whole, else up to 1 + MAX_PASSES passes */
    if (!is_short(w.t, w.n, short_bytes)) {
        w.outcap = w.n + 8;
        w.out = PyMem_Malloc((size_t)w.outcap * sizeof(Py_UCS4));
        if (w.out == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        if (reduce_once(&w, lead_bytes) < 0) {
            goto done;
        }
        for (int pass = 0; pass < MAX_PASSES; pass++) {
            int same = w.nout == w.n
                       && memcmp(w.out, w.t, (size_t)w.n * sizeof(Py_UCS4)) == 0;
            if (same || !w.has_openers || !has_span_chars(w.out, w.nout)) {
                break;  /* a fixed point by construction */
            }
            /* current = result.text */
            Py_UCS4 *swap = w.t;
            Py_ssize_t swapcap = w.tcap;
            w.t = w.out;
            w.n = w.nout;
            w.tcap = w.outcap;
            w.out = swap;
            w.outcap = swapcap;
            w.nout = 0;
            if (is_short(w.t, w.n, short_bytes)) {
                /* result.text is the current text */
                if (out_append(&w, w.t, w.n) < 0) {
                    goto done;
                }
                break;
            }
            if (reduce_once(&w, lead_bytes) < 0) {
                goto done;
            }
        }
        int stable = folded_already(&w);
        if (stable < 0) {
            goto done;
        }
        if (!stable) {
            /* explain() folds a text made that fold would change (reduce's first step on
             * it: a lead cut to "…" alone after a list item's break); left to Python */
            work_clear(&w);
            Py_RETURN_NONE;
        }
        result = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, w.out, w.nout);
    }
    else {
        result = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, w.t, w.n);
    }
done:
    work_clear(&w);
    return result;
}


/* ------------------------------------------------------------------------ */
/* The stages of reduce(), one at a time (for tests and benchmarks)          */
/* ------------------------------------------------------------------------ */

/* Does the str `text` (of length n) hold exactly the code points t[0:n]? */
static int
same_chars(PyObject *text, const Py_UCS4 *t, Py_ssize_t n)
{
    Py_UCS4 diff = 0;
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_1BYTE_KIND: {
        const Py_UCS1 *data = PyUnicode_1BYTE_DATA(text);
        for (Py_ssize_t i = 0; i < n; i++) {
            diff |= t[i] ^ data[i];
        }
        break;
    }
    case PyUnicode_2BYTE_KIND: {
        const Py_UCS2 *data = PyUnicode_2BYTE_DATA(text);
        for (Py_ssize_t i = 0; i < n; i++) {
            diff |= t[i] ^ data[i];
        }
        break;
    }
    default:
        return memcmp(t, PyUnicode_4BYTE_DATA(text), (size_t)n * sizeof(Py_UCS4)) == 0;
    }
    return diff == 0;
}

/* Loads args[0], a folded text, into w->t with the loader reduce() uses.
 * Returns 1 when reduce() would leave the text to Python (or before
 * configure()): the caller answers None; 0 when loaded; -1 on error, a
 * ValueError if the text is not folded (describe.fold(text) != text), since
 * the offsets are those of the folded text. */
static int
load_stage_text(Work *w, PyObject *text, const char *name)
{
    memset(w, 0, sizeof(*w));
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "%s() argument 1 must be str, not %.100s",
                     name, Py_TYPE(text)->tp_name);
        return -1;
    }
    if (config == NULL) {
        return 1;
    }
    w->cfg = config;
    int loaded = load_folded(w, text);
    if (loaded != 0) {
        return loaded;
    }
    if (w->n != PyUnicode_GET_LENGTH(text) || !same_chars(text, w->t, w->n)) {
        PyErr_Format(PyExc_ValueError, "%s() needs a folded text (describe.fold(text) == text)",
                     name);
        return -1;
    }
    return 0;
}

/* w->units as a list of (start, end) tuples */
static PyObject *
spans_to_list(const SpanVec *spans)
{
    PyObject *list = PyList_New(spans->n);
    if (list == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < spans->n; i++) {
        PyObject *pair = Py_BuildValue("(nn)", spans->v[i].start, spans->v[i].end);
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, pair);
    }
    return list;
}

/* split_sentences(text) (glue 0) and units(text) (glue 1): find_units(), as
 * reduce_once() runs it */
static PyObject *
stage_spans(PyObject *text, int glue, const char *name)
{
    Work w;
    PyObject *result = NULL;
    int loaded = load_stage_text(&w, text, name);
    if (loaded == 0 && find_units(&w, glue) == 0) {
        result = spans_to_list(&w.units);
    }
    else if (loaded == 1) {
        result = Py_NewRef(Py_None);
    }
    work_clear(&w);
    return result;
}

static PyObject *
fastreduce_split_sentences(PyObject *module, PyObject *text)
{
    return stage_spans(text, 0, "split_sentences");
}

static PyObject *
fastreduce_units(PyObject *module, PyObject *text)
{
    return stage_spans(text, 1, "units");
}

/* One (start, end) of rule_units(): two ints with 0 <= start <= end <= n. */
static int
read_span(PyObject *item, Py_ssize_t n, Span *span)
{
    PyObject *pair = PySequence_Fast(item, "rule_units() spans must be (start, end) pairs");
    if (pair == NULL) {
        return -1;
    }
    int ok = -1;
    if (PySequence_Fast_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_ValueError, "rule_units() spans must be (start, end) pairs");
        goto done;
    }
    PyObject *const *items = PySequence_Fast_ITEMS(pair);
    span->start = PyNumber_AsSsize_t(items[0], PyExc_IndexError);
    if (span->start == -1 && PyErr_Occurred()) {
        goto done;
    }
    span->end = PyNumber_AsSsize_t(items[1], PyExc_IndexError);
    if (span->end == -1 && PyErr_Occurred()) {
        goto done;
    }
    if (span->start < 0 || span->start > span->end || span->end > n) {
        PyErr_Format(PyExc_IndexError, "rule_units() span (%zd, %zd) is not within the text "
                     "(length %zd)", span->start, span->end, n);
        goto done;
    }
    ok = 0;
done:
    Py_DECREF(pair);
    return ok;
}

/* rule_units(text, spans): states_rule() on each span, as reduce_once() asks */
static PyObject *
fastreduce_rule_units(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Work w;
    PyObject *seq = NULL, *result = NULL;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "rule_units() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    int loaded = load_stage_text(&w, args[0], "rule_units");
    if (loaded != 0) {
        work_clear(&w);
        return loaded < 0 ? NULL : Py_NewRef(Py_None);
    }
    seq = PySequence_Fast(args[1], "rule_units() argument 2 must be a sequence of spans");
    if (seq == NULL) {
        goto done;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    result = PyList_New(count);
    if (result == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Span span;
        if (read_span(PySequence_Fast_GET_ITEM(seq, i), w.n, &span) < 0) {
            Py_CLEAR(result);
            goto done;
        }
        int rule = states_rule(w.cfg, w.t, w.n, span.start, span.end);
        PyList_SET_ITEM(result, i, Py_NewRef(rule ? Py_True : Py_False));
    }
done:
    Py_XDECREF(seq);
    work_clear(&w);
    return result;
}


/* ------------------------------------------------------------------------ */
/* The module                                                                */
/* ------------------------------------------------------------------------ */

PyDoc_STRVAR(configure_doc,
"configure(fragments, abbreviations, /)\n--\n\n"
"Compile the rule fragments (rules._ALL) and load the abbreviations\n"
"(describe._ABBREVIATIONS). Raises ValueError for a fragment outside the regex\n"
"subset this module compiles; the previous configuration then stays.");

static PyObject *
fastreduce_configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "configure() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    Config *cfg = PyMem_Calloc(1, sizeof(Config));
    if (cfg == NULL) {
        return PyErr_NoMemory();
    }
    cfg->fragments = PySequence_Tuple(args[0]);
    if (cfg->fragments == NULL) {
        goto fail;
    }
    cfg->abbreviations = PyFrozenSet_New(args[1]);
    if (cfg->abbreviations == NULL) {
        goto fail;
    }
    if (compile_fragments(cfg, cfg->fragments) < 0
            || load_abbreviations(cfg, cfg->abbreviations) < 0) {
        goto fail;
    }
    config_free(config);
    config = cfg;
    Py_RETURN_NONE;
fail:
    config_free(cfg);
    return NULL;
}

PyDoc_STRVAR(configuration_doc,
"configuration()\n--\n\n"
"What configure() compiled: a dict with the fragments (tuple), the\n"
"abbreviations (frozenset), and the DFA's size; None before configure().");

static PyObject *
fastreduce_configuration(PyObject *module, PyObject *unused)
{
    if (config == NULL) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("{sOsOsisisi}",
                         "fragments", config->fragments,
                         "abbreviations", config->abbreviations,
                         "dfa_states", config->dfa.nstates,
                         "byte_classes", config->dfa.nclasses,
                         "sigma_sensitive", config->sigma_sensitive);
}

PyDoc_STRVAR(reduce_doc,
"reduce(text, short_bytes, lead_bytes, /)\n--\n\n"
"describe.explain(text, short_bytes=..., lead_bytes=...).text, or None when the\n"
"input is outside what this module mirrors exactly (the caller then runs the\n"
"Python path). None also before configure().");

PyDoc_STRVAR(split_sentences_doc,
"split_sentences(text, /)\n--\n\n"
"The (start, end) of each of describe.split_sentences(text)'s sentences, by the\n"
"scan reduce() runs; text must be folded (describe.fold(text) == text, else\n"
"ValueError). None where reduce() would leave the text to Python.");

PyDoc_STRVAR(units_doc,
"units(text, /)\n--\n\n"
"The (start, end) of each of describe.units(text), by the scan reduce() runs;\n"
"text must be folded (else ValueError). None where reduce() would leave the\n"
"text to Python.");

PyDoc_STRVAR(rule_units_doc,
"rule_units(text, spans, /)\n--\n\n"
"For each (start, end) in spans: does text[start:end] state a rule, as\n"
"describe._reduce_once asks (rules.RuleScan(text).states_rule(start, end) or\n"
"rules.opens_with_instruction(text[start:end])), by the test reduce() runs.\n"
"text must be folded (else ValueError); a span outside it raises IndexError.\n"
"None where reduce() would leave the text to Python.");

static PyMethodDef fastreduce_methods[] = {
    {"reduce", (PyCFunction)(void (*)(void))fastreduce_reduce, METH_FASTCALL, reduce_doc},
    {"split_sentences", fastreduce_split_sentences, METH_O, split_sentences_doc},
    {"units", fastreduce_units, METH_O, units_doc},
    {"rule_units", (PyCFunction)(void (*)(void))fastreduce_rule_units, METH_FASTCALL,
     rule_units_doc},
    {"configure", (PyCFunction)(void (*)(void))fastreduce_configure, METH_FASTCALL,
     configure_doc},
    {"configuration", fastreduce_configuration, METH_NOARGS, configuration_doc},
    {NULL, NULL, 0, NULL}
};

/* The Python source this file mirrors by hand, as the live objects show it
 * (pattern text, or the constant); tests compare the two. */
static const struct {
    const char *name;
    const char *source;
} mirrored[] = {
    {"describe._FOLDABLE", "[^\\S ]\\s*| \\s+"},
    {"markup.MARKUP", "^[^\\S\\n]*(?:```|~~~|#|<[A-Za-z/])|</[A-Za-z]"},
    {"describe._LIST_MARKER",
     "(?:[-*+\u2022\u25aa\u2023\u25e6]|\\(?(?:\\d{1,3}|[a-z]|[ivx]{1,4})[.)])(?=\\s|\\Z)"},
    {"describe._SPAN_CHARS", "[`\\\"\u201c]"},
    {"describe._SPANS",
     "`[^`\\n]{1,400}`|\\\"[^\\\"\\n]{1,300}\\\"|\u201c[^\u201d\\n]{1,300}\u201d"},
    {"describe._END_ASCII", "[.!?](?=[\\\"'\u201d\u2019)\\]]{0,2} \\S)"},
    {"describe._END_ELLIPSIS", "\u2026(?=[\\\"'\u201d\u2019)\\]]{0,2} \\S)"},
    {"describe._OPENERS", "(\"'\u201c\u2018["},
    {"describe._CLOSERS", "\"'\u201d\u2019)]"},
    {"describe._TERMINAL", ".!?\u2026"},
    {"describe.ELLIPSIS", "\u2026"},
    {"rules._IMPERATIVE",
     "(?:[-*+\u2022]\\s*|\\d{1,3}[.)]\\s*)?(?:provide|specify|pass|set|supply|include"
     "|call|use|select|choose|omit|leave)\\b"},
    {"rules._IMPERATIVE_INSIDE",
     "(?<=\\s)(?:Provide|Specify|Pass|Set|Supply|Include|Call|Use|Select|Choose|Omit|Leave)\\b"},
    {"rules._SIGNAL",
     "[\u26a0\u2757\u203c\U0001f6a8\u26d4\U0001f6d1]|\\*(?<=\\w\\*)(?=[\\s,;)]|$)"
     "|[<>\u2264\u2265]=? ?\\d"
     "|[A-Z](?<![\\w][A-Z])[A-Z]{2,}(?!\\w)(?=[:!]| (?:use|call|do|the|this|must|be)\\b)"},
};

static int
fastreduce_exec(PyObject *module)
{
    init_flags();
    PyObject *table = PyDict_New();
    if (table == NULL) {
        return -1;
    }
    for (size_t i = 0; i < sizeof(mirrored) / sizeof(mirrored[0]); i++) {
        PyObject *value = PyUnicode_FromString(mirrored[i].source);
        if (value == NULL || PyDict_SetItemString(table, mirrored[i].name, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(table);
            return -1;
        }
        Py_DECREF(value);
    }
    PyObject *passes = PyLong_FromLong(MAX_PASSES);
    if (passes == NULL || PyDict_SetItemString(table, "describe._MAX_PASSES", passes) < 0) {
        Py_XDECREF(passes);
        Py_DECREF(table);
        return -1;
    }
    Py_DECREF(passes);
    if (PyModule_AddObject(module, "MIRRORED", table) < 0) {
        Py_DECREF(table);
        return -1;
    }
    return 0;
}

static void
fastreduce_free(void *module)
{
    config_free(config);
    config = NULL;
}

PyDoc_STRVAR(module_doc,
"The description reducer of caveman_batch.describe, in C.\n\n"
"reduce() returns exactly describe.explain(...).text, or None when unsure; the\n"
"caller then runs the Python path. configure() must be given rules._ALL and\n"
"describe._ABBREVIATIONS first (describe.py does that on import).\n"
"split_sentences(), units() and rule_units() run reduce()'s own stages alone.");

static struct PyModuleDef fastreduce_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "caveman_batch._fastreduce",
    .m_doc = module_doc,
    .m_size = -1,
    .m_methods = fastreduce_methods,
    .m_free = fastreduce_free,
};

PyMODINIT_FUNC
PyInit__fastreduce(void)
{
    PyObject *module = PyModule_Create(&fastreduce_module);
    if (module != NULL && fastreduce_exec(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
