/* _fastmean: the mean of a text's token vectors, for many texts in one call.
 *
 * mean_rows(table, texts, ids_of, out) is embedding.WordLlamaEmbedder's loop, exactly:
 *
 *     for row, words in enumerate(texts):
 *         ids = np.frombuffer(b"".join(map(ids_of.__getitem__, words)), dtype=np.intc)
 *         if ids.size:
 *             out[row] = table[ids].mean(axis=0)
 *
 * numpy sums the rows of table[ids] in order, in float32, from +0.0 (its identity: a
 * -0.0 in the first row comes out +0.0), then divides each sum by the count (checked
 * equal byte for byte: tests/test_fastmean.py). So does this, without making table[ids]
 * (a copy of every token's row) nor a Python object per text: the loop took about 2 of
 * the 3.3 s the bench registry's texts took to embed, this 0.8-1 s. It refuses a table
 * 1 wide (numpy sums that pairwise, along its contiguous axis) and an out buffer in the
 * table's memory.
 *
 * table: a C-contiguous float32 matrix (the model's token vectors); texts: a list of lists
 * of str; ids_of: a dict, word -> bytes of its token ids (native int32); out: a writable
 * C-contiguous float32 matrix of len(texts) rows of the table's width (a row is zero where
 * its text has no token). Returns True, or None, having written
 * nothing the caller may keep, when its input is not that (a word not in ids_of, an id
 * outside the table, ...): the caller then runs the loop above.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int
float_matrix(PyObject *obj, Py_buffer *view, int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (view->ndim != 2 || view->itemsize != (Py_ssize_t)sizeof(float) || view->format == NULL
        || strcmp(view->format, "f") != 0 || view->shape[1] <= 0) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* row += vector, element by element (each sum the same float in any order of the
 * elements): in blocks of 8, which the compiler turns into vector instructions at -O2
 * (a loop of unknown length it leaves scalar there: 1.6 s for the bench registry's
 * texts instead of 0.8-1 s) */
static inline void
add_row(float *restrict row, const float *restrict vector, Py_ssize_t dim)
{
    Py_ssize_t d = 0;
    for (; d + 8 <= dim; d += 8)
        for (int j = 0; j < 8; j++)
            row[d + j] += vector[d + j];
    for (; d < dim; d++)
        row[d] += vector[d];
}

/* The mean of one text's token rows into `row` (zero if it has none);
 * 0 if a word or an id is not what the loop above takes. */
static int
mean_of(const float *restrict table, Py_ssize_t rows, Py_ssize_t dim, PyObject *words,
        PyObject *ids_of, float *restrict row)
{
    Py_ssize_t count = 0;
    for (Py_ssize_t d = 0; d < dim; d++)
        row[d] = 0.0f;
    /* the lookup may run Python code (a key's __eq__) that changes the list or the dict:
     * the size is read again each time, and what is used held meanwhile */
    for (Py_ssize_t w = 0; w < PyList_GET_SIZE(words); w++) {
        PyObject *word = PyList_GET_ITEM(words, w);
        if (!PyUnicode_CheckExact(word))
            return 0;
        Py_INCREF(word);
        PyObject *ids = PyDict_GetItemWithError(ids_of, word);  /* borrowed */
        Py_DECREF(word);
        if (ids == NULL) {
            PyErr_Clear();
            return 0;
        }
        if (!PyBytes_CheckExact(ids) || PyBytes_GET_SIZE(ids) % (Py_ssize_t)sizeof(int32_t))
            return 0;
        const char *data = PyBytes_AS_STRING(ids);  /* (nothing below runs Python code) */
        Py_ssize_t k = PyBytes_GET_SIZE(ids) / (Py_ssize_t)sizeof(int32_t);
        for (Py_ssize_t i = 0; i < k; i++) {
            int32_t id;
            memcpy(&id, data + i * sizeof(int32_t), sizeof id);
            if (id < 0 || id >= rows)
                return 0;
            add_row(row, table + (Py_ssize_t)id * dim, dim);
            count++;
        }
    }
    if (count > 0) {
        /* the float32 sum over the count, rounded to float32 as numpy's mean does: in
         * double, that is the correctly rounded float32 quotient (53 >= 2 * 24 + 2 bits),
         * for any count a float32 holds exactly (below 2^24) */
        if (count >= (1 << 24))
            return 0;
        for (Py_ssize_t d = 0; d < dim; d++)
            row[d] = (float)((double)row[d] / (double)count);
    }
    return 1;
}

static PyObject *
mean_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "mean_rows(table, texts, ids_of, out)");
        return NULL;
    }
    PyObject *texts = args[1], *ids_of = args[2];
    if (!PyList_CheckExact(texts) || !PyDict_CheckExact(ids_of))
        Py_RETURN_NONE;
    Py_buffer table, out;
    if (!float_matrix(args[0], &table, 0))
        Py_RETURN_NONE;
    if (!float_matrix(args[3], &out, 1)) {
        PyBuffer_Release(&table);
        Py_RETURN_NONE;
    }
    Py_ssize_t dim = table.shape[1], n = PyList_GET_SIZE(texts);
    const char *table_end = (const char *)table.buf + table.len;
    const char *out_end = (const char *)out.buf + out.len;
    int ok = dim >= 2 && out.shape[1] == dim && out.shape[0] == n
             && (out_end <= (const char *)table.buf || table_end <= (const char *)out.buf);
    Py_INCREF(texts);
    for (Py_ssize_t t = 0; ok && t < n; t++) {
        if (PyList_GET_SIZE(texts) != n) {  /* changed by a key's __eq__ */
            ok = 0;
            break;
        }
        PyObject *words = PyList_GET_ITEM(texts, t);
        Py_INCREF(words);
        ok = PyList_CheckExact(words)
             && mean_of((const float *)table.buf, table.shape[0], dim, words, ids_of,
                        (float *)out.buf + t * dim);
        Py_DECREF(words);
    }
    Py_DECREF(texts);
    PyBuffer_Release(&out);
    PyBuffer_Release(&table);
    if (!ok)
        Py_RETURN_NONE;
    Py_RETURN_TRUE;
}

static PyMethodDef fastmean_methods[] = {
    {"mean_rows", (PyCFunction)(void (*)(void))mean_rows, METH_FASTCALL,
     "mean_rows(table, texts, ids_of, out) -> True (out[i]: the mean of text i's token "
     "rows), or None if the input is not what it handles."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastmean_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "caveman_batch._fastmean",
    .m_doc = "Texts' mean token vectors, in one call (see embedding.py).",
    .m_size = 0,
    .m_methods = fastmean_methods,
};

PyMODINIT_FUNC
PyInit__fastmean(void)
{
    return PyModuleDef_Init(&fastmean_module);
}
