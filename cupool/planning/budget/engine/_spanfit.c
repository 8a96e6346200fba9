/* The best-fit query of cupool.planning.budget.span_table.SpanTable, compiled.
 *
 * best_fit(starts, ends, lows, highs, count, sorted_count, size, start, end, budget) ->
 * offset or None. Rows [0, count) of the four int64 columns are residencies: ops
 * [starts, ends) holding bytes [lows, highs); rows [0, sorted_count) are in address order
 * (low byte, high byte, end op ascending: SpanTable sorts its rows once, before its first
 * query), the rows added since are not. The rows sharing an op with [start, end) are
 * scanned in address order (the sorted ones merged with the others, sorted here) with a
 * sentinel (budget, budget, -1) last: a row whose low byte lies `size` or more above the
 * scan's cursor (the highest byte so far, from 0) closes a hole; the smallest hole wins
 * (ties: the lowest), and inside it the offset is the cursor when the row that last raised
 * the cursor ends at or after the row above the hole, else the row's low byte less
 * `size`. None when no hole fits.
 *
 * The same answer as SpanTable's NumPy path (span_table.py), which
 * tests/planning/test_span_table.py compares with this one and with a plain loop: rows
 * equal in all three keys are interchangeable, so any sort gives the same scan. Integer
 * arithmetic only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../_int64_arg.h"

typedef struct {
    int64_t low, high, end;
} Row;

static int by_address(const void *a, const void *b) {
    const Row *x = a, *y = b;
    if (x->low != y->low) return x->low < y->low ? -1 : 1;
    if (x->high != y->high) return x->high < y->high ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The rows of one query, kept between calls (the GIL is held throughout). */
static Row *rows = NULL;
static Py_ssize_t rows_cap = 0;

static PyObject *best_fit(PyObject *self, PyObject *args) {
    PyObject *o_starts, *o_ends, *o_lows, *o_highs;
    Py_ssize_t count, sorted_count;
    long long size, start, end, budget;
    Arg a_starts = {0}, a_ends = {0}, a_lows = {0}, a_highs = {0};
    PyObject *result = NULL;
    (void)self;

    if (!PyArg_ParseTuple(args, "OOOOnnLLLL", &o_starts, &o_ends, &o_lows, &o_highs, &count,
                          &sorted_count, &size, &start, &end, &budget))
        return NULL;
    if (get_int64(o_starts, &a_starts, 0, "starts") || get_int64(o_ends, &a_ends, 0, "ends") ||
        get_int64(o_lows, &a_lows, 0, "lows") || get_int64(o_highs, &a_highs, 0, "highs"))
        goto done;
    Py_ssize_t n = a_starts.view.len / 8;
    if (count < 0 || count > n || sorted_count < 0 || sorted_count > count ||
        a_ends.view.len / 8 != n || a_lows.view.len / 8 != n || a_highs.view.len / 8 != n) {
        PyErr_Format(PyExc_ValueError,
                     "the four columns must have one length (starts has %zd rows), count "
                     "(=%zd) must lie in [0, that] and sorted_count (=%zd) in [0, count]",
                     n, count, sorted_count);
        goto done;
    }
    if (count + 1 > rows_cap) {
        Py_ssize_t cap = 2 * (count + 1);
        Row *grown = realloc(rows, (size_t)cap * sizeof(Row));
        if (!grown) {
            PyErr_NoMemory();
            goto done;
        }
        rows = grown;
        rows_cap = cap;
    }
    const int64_t *starts = a_starts.view.buf, *ends = a_ends.view.buf;
    const int64_t *lows = a_lows.view.buf, *highs = a_highs.view.buf;
    Py_ssize_t m = 0, m_sorted = 0;  /* matches; of them, from the sorted rows */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i == sorted_count) m_sorted = m;
        if (starts[i] < end && start < ends[i]) {
            rows[m].low = lows[i];
            rows[m].high = highs[i];
            rows[m].end = ends[i];
            m++;
        }
    }
    if (sorted_count == count) m_sorted = m;
    qsort(rows + m_sorted, (size_t)(m - m_sorted), sizeof(Row), by_address);
    const Row sentinel = {budget, budget, -1};
    int64_t cursor = 0, below_end = -1, best_hole = -1, best_offset = 0;
    Py_ssize_t a = 0, b = m_sorted;  /* the next sorted match, the next other one */
    for (Py_ssize_t k = 0; k <= m; k++) {
        const Row *row;
        if (k == m)
            row = &sentinel;
        else if (b == m || (a < m_sorted && by_address(rows + a, rows + b) <= 0))
            row = rows + a++;
        else
            row = rows + b++;
        int64_t hole = row->low - cursor;
        if (hole >= size && (best_hole < 0 || hole < best_hole)) {
            best_hole = hole;
            best_offset = below_end >= row->end ? cursor : row->low - size;
        }
        if (row->high > cursor) {
            cursor = row->high;
            below_end = row->end;
        }
    }
    if (best_hole < 0) {
        result = Py_None;
        Py_INCREF(result);
    } else {
        result = PyLong_FromLongLong(best_offset);
    }
done:;
    Arg *held[] = {&a_starts, &a_ends, &a_lows, &a_highs};
    for (size_t i = 0; i < 4; i++)
        if (held[i]->held) PyBuffer_Release(&held[i]->view);
    return result;
}

static PyMethodDef methods[] = {
    {"best_fit", best_fit, METH_VARARGS,
     "best_fit(starts, ends, lows, highs, count, sorted_count, size, start, end, budget) "
     "-> offset or None: SpanTable.best_fit over rows [0, count) of four int64 columns, "
     "the first sorted_count in address order (see cupool.planning.budget.span_table)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_spanfit",
    .m_doc = "Compiled best-fit query of cupool.planning.budget.span_table.SpanTable "
             "(identical answers).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__spanfit(void) { return PyModule_Create(&module); }
