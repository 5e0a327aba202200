/* _fastscan: which of many substrings occur in a text, in one pass over it.
 *
 * present(text, needles) returns tuple(needle in text for needle in needles),
 * exactly: payload detection asks some forty such questions of every tool output
 * (does it hold "diff --git ", "\nRan ", "error[", ...), and asked one by one each
 * is a pass over the whole text (str.find); most of the answers are no.  Here the
 * text is read once: each needle is filed under one pair of its chars (the one least
 * often seen in the text's start, see pair_counts), and at each position only the needles
 * filed under a pair that hashes as the two chars there (a bucket per hash) are compared
 * with the text around it; a needle found is taken out of its bucket, so the scan stops
 * as soon as every needle is found.  (A bucket per first char alone is several times
 * slower: a third of the needles start with a newline, and are compared at every line.)
 * A one-char needle is looked for alone (PyUnicode_FindChar).
 *
 * Characters are compared as code points whatever the strings' storage kinds
 * (latin-1, UCS-2, UCS-4), as `in` does; an empty needle is in every text.
 *
 * plain(text) is view._ANSI.sub("", text): a coloured build log holds an escape every few
 * chars, and the regex engine's cost per match was most of its reduce.
 *
 * led_lines(text, words) is the indexes of the lines (text.split("\n")) that one or more
 * blanks (space, tab) lead and whose rest starts with one of words (stacktrace._led_frames):
 * a trace's frame lines, found in one pass with their numbers, where the regex engine tried
 * a match at every line and the line numbers were then counted between the matches.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BUCKETS 4096
#define PAIR(a, b) ((((Py_UCS4)(a) * 131u) ^ (Py_UCS4)(b)) % BUCKETS)

typedef struct {
    Py_UCS4 *chars;
    Py_ssize_t len;
    Py_ssize_t off;  /* where in the needle the pair it is filed under starts */
} Needle;

/* The pairs of the first SAMPLE chars of the text, counted: each needle is filed under its
 * pair least often seen there, so the scan stops at fewer places where the needle turns out
 * not to be ("error: " under "r:" in a log full of ": "; "\ndiff --git " under " -"). The
 * first pair of a needle is no better a guess than any other. */
#define SAMPLE 32768

static uint16_t *
pair_counts(int kind, const void *data, Py_ssize_t len)
{
    uint16_t *counts = PyMem_Calloc(65536, sizeof(uint16_t));
    if (counts == NULL)
        return NULL;
    Py_ssize_t n = len < SAMPLE ? len : SAMPLE;
    for (Py_ssize_t i = 0; i + 1 < n; i++) {
        Py_UCS4 a = PyUnicode_READ(kind, data, i), b = PyUnicode_READ(kind, data, i + 1);
        unsigned p = kind == PyUnicode_1BYTE_KIND ? a << 8 | b : PAIR(a, b);
        if (counts[p] < UINT16_MAX)
            counts[p]++;
    }
    return counts;
}

static Py_ssize_t
rarest_pair(const Py_UCS4 *chars, Py_ssize_t len, const uint16_t *counts, int latin1)
{
    Py_ssize_t best = 0;
    unsigned seen = UINT16_MAX + 1u;
    for (Py_ssize_t k = 0; k + 1 < len; k++) {
        unsigned p = latin1 ? chars[k] << 8 | chars[k + 1] : PAIR(chars[k], chars[k + 1]);
        if (counts[p] < seen) {
            seen = counts[p];
            best = k;
        }
    }
    return best;
}

/* Compare the needles filed under the pair at `i` (bucket `b`) with the text around it;
 * unlink each found from its bucket. */
#define WALK(b, i)                                                                  \
    do {                                                                            \
        Py_ssize_t *link = &head[b];                                                \
        while (*link >= 0) {                                                        \
            Py_ssize_t j = *link;                                                   \
            const Needle *nd = &nd_all[j];                                          \
            Py_ssize_t at = (i) - nd->off;                                          \
            int hit = at >= 0 && nd->len <= len - at;                               \
            for (Py_ssize_t k = 0; hit && k < nd->len; k++)                         \
                hit = (Py_UCS4)s[at + k] == nd->chars[k];                           \
            if (hit) {                                                              \
                found[j] = 1;                                                       \
                remaining--;                                                        \
                *link = next[j];                                                    \
            } else {                                                                \
                link = &next[j];                                                    \
            }                                                                       \
        }                                                                           \
    } while (0)

/* Scan `len` chars of kind TYPE at `data`; unlink each needle found from its bucket. */
#define SCAN(TYPE)                                                                  \
    do {                                                                            \
        const TYPE *s = (const TYPE *)data;                                         \
        for (Py_ssize_t i = 0; i + 1 < len && remaining > 0; i++) {                \
            size_t b = PAIR(s[i], s[i + 1]);                                        \
            if (occupied[b / 64] >> (b % 64) & 1)                                   \
                WALK(b, i);                                                         \
        }                                                                           \
    } while (0)

/* SCAN for latin-1 text (most tool output): its pairs of chars index a bit table of all
 * 65,536 pairs directly (8 KB), and four positions are tested at once, so a run of
 * positions where no needle starts costs a few instructions each; the chain of a pair
 * is walked only where a needle really starts with it. */
#define PAIRBIT(p) (pairs[(p) >> 6] >> ((p) & 63) & 1)
#define SCAN_LATIN1()                                                               \
    do {                                                                            \
        const Py_UCS1 *s = (const Py_UCS1 *)data;                                   \
        Py_ssize_t i = 0, last = len - 1;                                           \
        while (i < last && remaining > 0) {                                        \
            if (i + 4 <= last) {                                                    \
                unsigned p0 = (unsigned)s[i] << 8 | s[i + 1];                       \
                unsigned p1 = (unsigned)s[i + 1] << 8 | s[i + 2];                   \
                unsigned p2 = (unsigned)s[i + 2] << 8 | s[i + 3];                   \
                unsigned p3 = (unsigned)s[i + 3] << 8 | s[i + 4];                   \
                if (!(PAIRBIT(p0) | PAIRBIT(p1) | PAIRBIT(p2) | PAIRBIT(p3))) {     \
                    i += 4;                                                         \
                    continue;                                                       \
                }                                                                   \
            }                                                                       \
            unsigned p = (unsigned)s[i] << 8 | s[i + 1];                           \
            if (PAIRBIT(p))                                                         \
                WALK(PAIR(s[i], s[i + 1]), i);                                      \
            i++;                                                                    \
        }                                                                           \
    } while (0)

static PyObject *
present(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "present(text: str, needles: tuple[str, ...])");
        return NULL;
    }
    PyObject *text = args[0], *needles = args[1];
    Py_ssize_t n = PyTuple_GET_SIZE(needles);
    if (PyUnicode_READY(text) < 0)
        return NULL;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *needle = PyTuple_GET_ITEM(needles, j);
        if (!PyUnicode_Check(needle)) {
            PyErr_SetString(PyExc_TypeError, "present: every needle must be a str");
            return NULL;
        }
        if (PyUnicode_READY(needle) < 0)
            return NULL;
    }
    PyObject *result = NULL;
    Needle *nd_all = PyMem_Calloc(n ? n : 1, sizeof(Needle));
    Py_ssize_t *next = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    char *found = PyMem_Calloc(n ? n : 1, 1);
    Py_ssize_t *head = PyMem_Malloc(BUCKETS * sizeof(Py_ssize_t));
    uint64_t occupied[BUCKETS / 64] = {0};  /* a bit per bucket: most pairs start no needle */
    uint64_t *pairs = NULL;  /* latin-1 text: a bit per pair of chars a needle starts with */
    int latin1 = PyUnicode_KIND(text) == PyUnicode_1BYTE_KIND;
    if (latin1)
        pairs = PyMem_Calloc(65536 / 64, sizeof(uint64_t));
    uint16_t *counts = pair_counts(PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text));
    if (nd_all == NULL || next == NULL || found == NULL || head == NULL || (latin1 && pairs == NULL)
        || counts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int b = 0; b < BUCKETS; b++)
        head[b] = -1;
    Py_ssize_t len = PyUnicode_GET_LENGTH(text), remaining = 0;
    for (Py_ssize_t j = n - 1; j >= 0; j--) {  /* backwards: each bucket lists needles in order */
        PyObject *needle = PyTuple_GET_ITEM(needles, j);
        Py_ssize_t m = PyUnicode_GET_LENGTH(needle);
        if (m == 0) {
            found[j] = 1;
            continue;
        }
        if (m > len)
            continue;  /* never found */
        if (m == 1) {
            Py_UCS4 c = PyUnicode_READ_CHAR(needle, 0);
            found[j] = PyUnicode_FindChar(text, c, 0, len, 1) >= 0;
            continue;
        }
        if (latin1 && PyUnicode_MAX_CHAR_VALUE(needle) > 0xff)
            continue;  /* holds a char latin-1 text does not: never found */
        nd_all[j].chars = PyUnicode_AsUCS4Copy(needle);
        if (nd_all[j].chars == NULL)
            goto done;
        nd_all[j].len = m;
        Py_ssize_t k = nd_all[j].off = rarest_pair(nd_all[j].chars, m, counts, latin1);
        Py_ssize_t b = PAIR(nd_all[j].chars[k], nd_all[j].chars[k + 1]);
        next[j] = head[b];
        head[b] = j;
        occupied[b / 64] |= (uint64_t)1 << (b % 64);
        if (latin1) {
            unsigned p = (unsigned)nd_all[j].chars[k] << 8 | nd_all[j].chars[k + 1];
            pairs[p >> 6] |= (uint64_t)1 << (p & 63);
        }
        remaining++;
    }
    const void *data = PyUnicode_DATA(text);
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_1BYTE_KIND:
        SCAN_LATIN1();
        break;
    case PyUnicode_2BYTE_KIND:
        SCAN(Py_UCS2);
        break;
    default:
        SCAN(Py_UCS4);
        break;
    }
    result = PyTuple_New(n);
    if (result == NULL)
        goto done;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *b = found[j] ? Py_True : Py_False;
        Py_INCREF(b);
        PyTuple_SET_ITEM(result, j, b);
    }
done:
    if (nd_all != NULL) {
        for (Py_ssize_t j = 0; j < n; j++)
            PyMem_Free(nd_all[j].chars);
    }
    PyMem_Free(nd_all);
    PyMem_Free(next);
    PyMem_Free(found);
    PyMem_Free(head);
    PyMem_Free(pairs);
    PyMem_Free(counts);
    return result;
}

/* The end (exclusive) of the ANSI escape that starts at `i` (text[i] is ESC), or i when none
 * does: the three alternatives of view._ANSI, tried in its order,
 *   ESC [ [0-?]* [ -/]* [@-~]        (CSI: colours, cursor moves; the sets are disjoint, so
 *                                     the greedy reading is the only one that can match)
 *   ESC ] [^BEL ESC LF]* (BEL | ESC \)? (OSC: titles, links; always matches; one left
 *                                     open ends with its line)
 *   ESC [@-Z\\-_]                    (two-char escapes) */
static Py_ssize_t
escape_end(int kind, const void *data, Py_ssize_t n, Py_ssize_t i)
{
    if (i + 1 >= n)
        return i;
    Py_UCS4 c = PyUnicode_READ(kind, data, i + 1);
    if (c == '[') {
        Py_ssize_t j = i + 2;
        while (j < n && (c = PyUnicode_READ(kind, data, j)) >= 0x30 && c <= 0x3f)
            j++;
        while (j < n && (c = PyUnicode_READ(kind, data, j)) >= 0x20 && c <= 0x2f)
            j++;
        if (j < n && (c = PyUnicode_READ(kind, data, j)) >= 0x40 && c <= 0x7e)
            return j + 1;
        return i;  /* '[' is no two-char escape */
    }
    if (c == ']') {
        Py_ssize_t j = i + 2;
        while (j < n && (c = PyUnicode_READ(kind, data, j)) != 0x07 && c != 0x1b && c != '\n')
            j++;
        if (j < n && c == 0x07)
            return j + 1;
        if (j + 1 < n && c == 0x1b && PyUnicode_READ(kind, data, j + 1) == '\\')
            return j + 2;
        return j;
    }
    if ((c >= 0x40 && c <= 0x5a) || (c >= 0x5c && c <= 0x5f))
        return i + 2;
    return i;
}

/* plain(text) -> view._ANSI.sub("", text): every escape a terminal eats, taken out. */
static PyObject *
plain(PyObject *module, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "plain(text: str)");
        return NULL;
    }
    if (PyUnicode_READY(text) < 0)
        return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_ssize_t first = PyUnicode_FindChar(text, 0x1b, 0, n, 1);
    if (first == -2)
        return NULL;
    if (first < 0)
        return Py_NewRef(text);
    int kind = PyUnicode_KIND(text);
    const char *data = PyUnicode_DATA(text);
    char *out = PyMem_Malloc(n * kind);
    if (out == NULL)
        return PyErr_NoMemory();
    Py_ssize_t kept = 0, from = 0, i = first;
    while (i >= 0 && i < n) {  /* i: an ESC; copy what lies before it, skip the escape */
        Py_ssize_t end = escape_end(kind, data, n, i);
        if (end > i) {
            memcpy(out + kept * kind, data + from * kind, (i - from) * kind);
            kept += i - from;
            from = end;
        } else {
            end = i + 1;  /* a lone ESC stays */
        }
        i = end < n ? PyUnicode_FindChar(text, 0x1b, end, n, 1) : -1;
        if (i == -2) {
            PyMem_Free(out);
            return NULL;
        }
    }
    memcpy(out + kept * kind, data + from * kind, (n - from) * kind);
    kept += n - from;
    PyObject *result = PyUnicode_FromKindAndData(kind, out, kept);  /* narrowed when it can be */
    PyMem_Free(out);
    return result;
}


/* Whether `word` occurs in `data` (of `kind`, `n` chars) at `at`, compared as code points. */
static int
word_at(int kind, const void *data, Py_ssize_t n, Py_ssize_t at, PyObject *word)
{
    Py_ssize_t len = PyUnicode_GET_LENGTH(word);
    if (len > n - at)
        return 0;
    int wkind = PyUnicode_KIND(word);
    const void *wdata = PyUnicode_DATA(word);
    for (Py_ssize_t k = 0; k < len; k++)
        if (PyUnicode_READ(kind, data, at + k) != PyUnicode_READ(wkind, wdata, k))
            return 0;
    return 1;
}

/* led_lines(text, words) -> [i for i, line in enumerate(text.split("\n")) if the line starts
 * with a blank and line.lstrip(" \t").startswith(words)]. */
static PyObject *
led_lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "led_lines(text: str, words: tuple[str, ...])");
        return NULL;
    }
    PyObject *text = args[0], *words = args[1];
    Py_ssize_t nwords = PyTuple_GET_SIZE(words);
    for (Py_ssize_t w = 0; w < nwords; w++) {
        PyObject *word = PyTuple_GET_ITEM(words, w);
        if (!PyUnicode_Check(word)) {
            PyErr_SetString(PyExc_TypeError, "led_lines: every word is a str");
            return NULL;
        }
        if (PyUnicode_READY(word) < 0)
            return NULL;
    }
    if (PyUnicode_READY(text) < 0)
        return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    PyObject *found = PyList_New(0);
    if (found == NULL)
        return NULL;
    Py_ssize_t line = 0, start = 0;
    while (start <= n) {
        Py_ssize_t j = start;
        while (j < n) {
            Py_UCS4 c = PyUnicode_READ(kind, data, j);
            if (c != ' ' && c != '\t')
                break;
            j++;
        }
        if (j > start) {
            for (Py_ssize_t w = 0; w < nwords; w++) {
                if (word_at(kind, data, n, j, PyTuple_GET_ITEM(words, w))) {
                    PyObject *index = PyLong_FromSsize_t(line);
                    if (index == NULL || PyList_Append(found, index) < 0) {
                        Py_XDECREF(index);
                        Py_DECREF(found);
                        return NULL;
                    }
                    Py_DECREF(index);
                    break;
                }
            }
        }
        Py_ssize_t end = j < n ? PyUnicode_FindChar(text, '\n', j, n, 1) : -1;
        if (end == -2) {
            Py_DECREF(found);
            return NULL;
        }
        if (end < 0)
            break;
        start = end + 1;
        line++;
    }
    return found;
}

static PyMethodDef fastscan_methods[] = {
    {"plain", (PyCFunction)plain, METH_O, "plain(text) -> the text without its ANSI escape codes."},
    {"present", (PyCFunction)(void (*)(void))present, METH_FASTCALL,
     "present(text, needles) -> tuple(needle in text for needle in needles), in one pass."},
    {"led_lines", (PyCFunction)(void (*)(void))led_lines, METH_FASTCALL,
     "led_lines(text, words) -> the lines a blank leads whose rest starts with one of words."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastscan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "caveman_batch._fastscan",
    .m_doc = "One pass over a text: which of many substrings it holds (see payload/view.py).",
    .m_size = 0,
    .m_methods = fastscan_methods,
};

PyMODINIT_FUNC
PyInit__fastscan(void)
{
    return PyModuleDef_Init(&fastscan_module);
}
