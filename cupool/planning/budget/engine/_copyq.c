/* The planners' copy queue (cupool.planning.budget.engine.copies), compiled.
 *
 * CopyQueue keeps one FIFO copy engine's copies in issue order in six parallel arrays of
 * doubles: issue, length and due time of each copy, and three caches: its finish time, its
 * tolerance (how much later it may finish without any copy from it on missing its due
 * time) and the delay the copies behind it absorb. Every operation is the one of
 * copies.PythonCopyEngine with the same floating-point operations in the same order, so
 * that every answer and every cached value is bit for bit the Python one:
 *
 *   - max(a, b) and min(a, b) are Python's: the first argument unless the second compares
 *     greater (smaller), which decides ties such as 0.0 and -0.0 alike (py_max, py_min);
 *   - bisection is Python's bisect_right / bisect_left over the issue times;
 *   - the 1e-9 µs tolerances are the same double constant;
 *   - caches are brought up to date by the same incremental walks (changed,
 *     tolerance_down), including where they stop.
 *
 * Where Python keeps references to its old lists, this queue updates its arrays in place:
 * after an insertion or removal at k every array is shifted at k first, so that the old
 * value of the copy now at j is where the Python walks read it (old_f[j - shift], and
 * old_after[j] below k, which no walk has overwritten when it is read).
 *
 * set_aside and put_back: Python restores the caches it kept from before set_aside; this
 * queue inserts the copy again with the incremental walk of add, which computes the same
 * values (the walks give exactly what computing the caches afresh gives, and the queue is
 * the one from before), and then forgets the caches that were not computed before, so the
 * state is Python's in every case. Only queries may run between the two calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#define SLACK 1e-9 /* µs of rounding the on-time checks tolerate, as the Python code does */

typedef struct {
    PyObject_HEAD
    Py_ssize_t n, cap;
    double *issue, *length, *due; /* the copies, in issue order */
    double *finish, *tol, *after; /* caches; `after` is Python's _after */
    int finishes_valid;           /* Python: _finishes is not None */
    int tolerances_valid;         /* Python: _tol is not None (implies finishes_valid) */
} Queue;

/* Python's max(a, b) and min(a, b) for two floats. */
static inline double py_max(double a, double b) { return b > a ? b : a; }
static inline double py_min(double a, double b) { return b < a ? b : a; }

static Py_ssize_t bisect_right(const Queue *q, double x) {
    Py_ssize_t lo = 0, hi = q->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (x < q->issue[mid]) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

static Py_ssize_t bisect_left(const Queue *q, double x) {
    Py_ssize_t lo = 0, hi = q->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (q->issue[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int reserve(Queue *q, Py_ssize_t need) {
    if (need <= q->cap) return 0;
    Py_ssize_t cap = q->cap ? 2 * q->cap : 64;
    if (cap < need) cap = need;
    double **arrays[] = {&q->issue, &q->length, &q->due, &q->finish, &q->tol, &q->after};
    for (size_t i = 0; i < 6; i++) {
        double *grown = PyMem_Realloc(*arrays[i], (size_t)cap * sizeof(double));
        if (!grown) { PyErr_NoMemory(); return -1; }
        *arrays[i] = grown;
    }
    q->cap = cap;
    return 0;
}

/* Opens slot k in every array (the caller fills issue, length, due). */
static int open_slot(Queue *q, Py_ssize_t k) {
    if (reserve(q, q->n + 1)) return -1;
    size_t bytes = (size_t)(q->n - k) * sizeof(double);
    double *arrays[] = {q->issue, q->length, q->due, q->finish, q->tol, q->after};
    for (size_t i = 0; i < 6; i++) memmove(arrays[i] + k + 1, arrays[i] + k, bytes);
    q->n++;
    return 0;
}

static void close_slot(Queue *q, Py_ssize_t k) {
    size_t bytes = (size_t)(q->n - k - 1) * sizeof(double);
    double *arrays[] = {q->issue, q->length, q->due, q->finish, q->tol, q->after};
    for (size_t i = 0; i < 6; i++) memmove(arrays[i] + k, arrays[i] + k + 1, bytes);
    q->n--;
}

/* finishes(): FIFO in issue order, each copy starting when the engine is free and it is
 * issued. */
static void ensure_finishes(Queue *q) {
    if (q->finishes_valid) return;
    double free_at = 0.0;
    for (Py_ssize_t j = 0; j < q->n; j++) {
        free_at = py_max(free_at, q->issue[j]) + q->length[j];
        q->finish[j] = free_at;
    }
    q->finishes_valid = 1;
}

/* _tolerance_down: fills tol and after from copy j down to copy 0. Below stop_below the
 * arrays still hold the old values, so the walk stops where the delay reaching a copy is
 * what reached it before (stop_below = 0: a walk afresh, which never stops early). */
static void tolerance_down(Queue *q, Py_ssize_t j, double after, Py_ssize_t stop_below) {
    const double *finish = q->finish, *issue = q->issue, *due = q->due;
    double *tol = q->tol, *afters = q->after;
    while (j >= 0) {
        if (j < stop_below && afters[j] == after) return;
        afters[j] = after;
        tol[j] = py_min(due[j] - finish[j], after);
        double before = j ? finish[j - 1] : 0.0;
        double start = py_max(before, issue[j]);
        double idle = start - before;
        if (j) after = idle + tol[j];
        j--;
    }
}

/* _tolerance(): the tolerances, computed afresh when not cached. */
static void ensure_tolerances(Queue *q) {
    ensure_finishes(q);
    if (q->tolerances_valid) return;
    tolerance_down(q, q->n - 1, INFINITY, 0);
    q->tolerances_valid = 1;
}

/* _changed: the caches after copy k was inserted (every array already opened at k) or the
 * copy at k removed (every array already closed at k). */
static void changed(Queue *q, Py_ssize_t k, int inserted) {
    if (!q->finishes_valid) {
        q->tolerances_valid = 0;
        return;
    }
    Py_ssize_t n = q->n, resync = n;
    double *finish = q->finish;
    double free_at = k ? finish[k - 1] : 0.0;
    for (Py_ssize_t j = k; j < n; j++) {
        free_at = py_max(free_at, q->issue[j]) + q->length[j];
        /* finish[j] holds the old finish of the copy now at j until it is written */
        if ((j > k || !inserted) && finish[j] == free_at) {
            resync = j;
            break;
        }
        finish[j] = free_at;
    }
    if (!q->tolerances_valid) return;
    Py_ssize_t j = resync - 1;
    double incoming = INFINITY;
    if (resync < n && j >= 0) {
        double idle = py_max(finish[j], q->issue[resync]) - finish[j];
        incoming = idle + q->tol[resync];
    }
    tolerance_down(q, j, incoming, k);
}

static void insert_at(Queue *q, Py_ssize_t k, double issue, double length, double due) {
    q->issue[k] = issue;
    q->length[k] = length;
    q->due[k] = due;
    changed(q, k, 1);
}

static int add_copy(Queue *q, double issue, double length, double due) {
    Py_ssize_t k = bisect_right(q, issue);
    if (open_slot(q, k)) return -1;
    insert_at(q, k, issue, length, due);
    return 0;
}

static double finish_if_added(Queue *q, double issue, double length) {
    Py_ssize_t k = bisect_right(q, issue);
    ensure_finishes(q);
    double free_at = k ? q->finish[k - 1] : 0.0;
    return py_max(free_at, issue) + length;
}

static int fits(Queue *q, double issue, double length, double due) {
    Py_ssize_t k = bisect_right(q, issue);
    ensure_finishes(q);
    double before = k ? q->finish[k - 1] : 0.0;
    double finish = py_max(before, issue) + length;
    if (finish > due + SLACK) return 0;
    if (k == q->n) return 1;
    double old_start = py_max(before, q->issue[k]);
    double delay = py_max(0.0, py_max(finish, q->issue[k]) - old_start);
    ensure_tolerances(q);
    return delay <= q->tol[k] + SLACK;
}

/* ---- arguments ------------------------------------------------------------------------ */

static inline int as_double(PyObject *o, double *out) {
    if (PyFloat_CheckExact(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        return 0;
    }
    *out = PyFloat_AsDouble(o);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* Reads the float arguments `names[0..count)` of method `method`, positional or by
 * keyword; those from `required` on are optional and keep the value already in `out`. */
static int read_doubles(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                        const char *method, const char *const *names, int count,
                        int required, double *out) {
    int given[8] = {0};
    if (nargs > count) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", method,
                     count, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (as_double(args[i], &out[i])) return -1;
        given[i] = 1;
    }
    Py_ssize_t keywords = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < keywords; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        int at = 0;
        while (at < count && PyUnicode_CompareWithASCIIString(name, names[at]) != 0) at++;
        if (at == count || given[at]) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected or repeated argument %R",
                         method, name);
            return -1;
        }
        if (as_double(args[nargs + i], &out[at])) return -1;
        given[at] = 1;
    }
    for (int i = 0; i < required; i++) {
        if (!given[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing argument '%s'", method, names[i]);
            return -1;
        }
    }
    return 0;
}

static const char *const ISSUE_LENGTH[] = {"issue", "length"};
static const char *const ISSUE_LENGTH_DUE[] = {"issue", "length", "due"};
static const char *const ISSUE_LENGTH_END[] = {"issue", "length", "end"};

/* A QueuedCopy's three numbers (its fields issue_us, length_us, due_us). */
static int read_copy(PyObject *copy, PyObject **fields, double *values) {
    static const char *const names[] = {"issue_us", "length_us", "due_us"};
    for (int i = 0; i < 3; i++) fields[i] = NULL;
    for (int i = 0; i < 3; i++) {
        fields[i] = PyObject_GetAttrString(copy, names[i]);
        if (!fields[i] || as_double(fields[i], &values[i])) {
            for (int j = 0; j <= i; j++) Py_XDECREF(fields[j]);
            return -1;
        }
    }
    return 0;
}

static PyObject *list_of(const double *values, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyFloat_FromDouble(values[i]);
        if (!item) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* A list of floats read into `out` (n items); -1 with an exception if it is not one. */
static int read_list(PyObject *list, Py_ssize_t n, double *out) {
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != n) {
        PyErr_SetString(PyExc_ValueError, "CopyQueue state: expected lists of equal length");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (as_double(PyList_GET_ITEM(list, i), &out[i])) return -1;
    return 0;
}

static int read_index(PyObject *o, Py_ssize_t *out) {
    *out = PyLong_AsSsize_t(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* starts[i] as a double, for a list `starts`; -1 with IndexError outside it. */
static int start_at(PyObject *starts, Py_ssize_t i, double *out) {
    if (i < 0 || i >= PyList_GET_SIZE(starts)) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return -1;
    }
    return as_double(PyList_GET_ITEM(starts, i), out);
}

/* ---- methods -------------------------------------------------------------------------- */

static PyObject *Queue_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) || (kwargs && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "CopyQueue() takes no arguments");
        return NULL;
    }
    Queue *q = (Queue *)type->tp_alloc(type, 0);
    if (!q) return NULL;
    q->finishes_valid = q->tolerances_valid = 1; /* an empty queue: [] and [] */
    return (PyObject *)q;
}

static void Queue_dealloc(Queue *q) {
    PyMem_Free(q->issue);
    PyMem_Free(q->length);
    PyMem_Free(q->due);
    PyMem_Free(q->finish);
    PyMem_Free(q->tol);
    PyMem_Free(q->after);
    Py_TYPE(q)->tp_free((PyObject *)q);
}

static PyObject *Queue_add(Queue *q, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    double v[3] = {0.0, 0.0, INFINITY};
    if (read_doubles(args, nargs, kwnames, "add", ISSUE_LENGTH_DUE, 3, 2, v)) return NULL;
    if (add_copy(q, v[0], v[1], v[2])) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Queue_remove(Queue *q, PyObject *copy) {
    PyObject *fields[3];
    double v[3];
    if (read_copy(copy, fields, v)) return NULL;
    for (Py_ssize_t k = bisect_left(q, v[0]); k < q->n; k++) {
        if (q->length[k] == v[1] && q->due[k] == v[2]) {
            close_slot(q, k);
            changed(q, k, 0);
            for (int i = 0; i < 3; i++) Py_DECREF(fields[i]);
            Py_RETURN_NONE;
        }
    }
    PyErr_Format(PyExc_ValueError, "no copy issued at %S us for %S us due %S us", fields[0],
                 fields[1], fields[2]);
    for (int i = 0; i < 3; i++) Py_DECREF(fields[i]);
    return NULL;
}

/* _set_aside(copy) -> (index, caches): removes the copy as set_aside does; `caches` says
 * which caches were computed before (0 none, 1 the finishes, 2 finishes and tolerances). */
static PyObject *Queue_set_aside(Queue *q, PyObject *copy) {
    PyObject *fields[3];
    double v[3];
    if (read_copy(copy, fields, v)) return NULL;
    for (int i = 0; i < 3; i++) Py_DECREF(fields[i]);
    int caches = q->finishes_valid + (q->finishes_valid && q->tolerances_valid);
    Py_ssize_t k = bisect_left(q, v[0]);
    while (k < q->n && !(q->length[k] == v[1] && q->due[k] == v[2])) k++;
    if (k == q->n) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return NULL;
    }
    close_slot(q, k);
    changed(q, k, 0);
    return Py_BuildValue("(ni)", k, caches);
}

/* _put_back(copy, index, caches): the copy back at `index` (see the file's comment). */
static PyObject *Queue_put_back(Queue *q, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *fields[3];
    double v[3];
    Py_ssize_t k, caches;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_put_back(copy, index, caches)");
        return NULL;
    }
    if (read_index(args[1], &k) || read_index(args[2], &caches)) return NULL;
    if (read_copy(args[0], fields, v)) return NULL;
    for (int i = 0; i < 3; i++) Py_DECREF(fields[i]);
    if (k < 0) {
        PyErr_Format(PyExc_ValueError, "put_back: index (=%zd) must be >= 0", k);
        return NULL;
    }
    if (k < q->n && q->issue[k] == v[0]) {
        if (add_copy(q, v[0], v[1], v[2])) return NULL;
        Py_RETURN_NONE;
    }
    if (k > q->n) k = q->n;
    if (open_slot(q, k)) return NULL;
    insert_at(q, k, v[0], v[1], v[2]);
    if (caches < 2) q->tolerances_valid = 0;
    if (caches < 1) q->finishes_valid = 0;
    Py_RETURN_NONE;
}

static PyObject *Queue_finishes(Queue *q, PyObject *Py_UNUSED(ignored)) {
    ensure_finishes(q);
    return list_of(q->finish, q->n);
}

static PyObject *Queue_tolerances(Queue *q, PyObject *Py_UNUSED(ignored)) {
    ensure_tolerances(q);
    return list_of(q->tol, q->n);
}

static PyObject *Queue_finish_if_added(Queue *q, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames) {
    double v[2];
    if (read_doubles(args, nargs, kwnames, "finish_if_added", ISSUE_LENGTH, 2, 2, v))
        return NULL;
    return PyFloat_FromDouble(finish_if_added(q, v[0], v[1]));
}

static PyObject *Queue_fits(Queue *q, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
    double v[3];
    if (read_doubles(args, nargs, kwnames, "fits", ISSUE_LENGTH_DUE, 3, 3, v)) return NULL;
    return PyBool_FromLong(fits(q, v[0], v[1], v[2]));
}

static PyObject *Queue_lateness(Queue *q, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    double v[3];
    if (read_doubles(args, nargs, kwnames, "lateness", ISSUE_LENGTH_DUE, 3, 3, v))
        return NULL;
    double issue = v[0], length = v[1], due = v[2];
    Py_ssize_t k = bisect_right(q, issue);
    ensure_finishes(q);
    double before = k ? q->finish[k - 1] : 0.0;
    double finish = py_max(before, issue) + length;
    double late = py_max(0.0, finish - due);
    if (k < q->n) {
        double old_start = py_max(before, q->issue[k]);
        double delay = py_max(0.0, py_max(finish, q->issue[k]) - old_start);
        ensure_tolerances(q);
        late += py_max(0.0, delay - py_max(q->tol[k], 0.0));
    }
    return PyFloat_FromDouble(late);
}

static PyObject *Queue_end_growth(Queue *q, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    double v[3];
    if (read_doubles(args, nargs, kwnames, "end_growth", ISSUE_LENGTH_END, 3, 3, v))
        return NULL;
    double issue = v[0], length = v[1], end = v[2];
    ensure_finishes(q);
    double before = py_max(end, q->n ? q->finish[q->n - 1] : 0.0);
    double free_at = finish_if_added(q, issue, length);
    for (Py_ssize_t j = bisect_right(q, issue); j < q->n; j++)
        free_at = py_max(free_at, q->issue[j]) + q->length[j];
    return PyFloat_FromDouble(py_max(0.0, free_at - before));
}

/* first_late(starts, lo, hi, length, due): bisection over [lo, hi) for the first i whose
 * copy issued at starts[i] finishes after due + SLACK. */
static PyObject *Queue_first_late(Queue *q, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t lo, hi;
    double length, due;
    if (nargs != 5 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "first_late(starts: list, lo, hi, length, due)");
        return NULL;
    }
    if (read_index(args[1], &lo) || read_index(args[2], &hi) || as_double(args[3], &length)
        || as_double(args[4], &due))
        return NULL;
    PyObject *starts = args[0];
    ensure_finishes(q);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        double issue;
        if (start_at(starts, mid, &issue)) return NULL;
        Py_ssize_t k = bisect_right(q, issue);
        if (py_max(k ? q->finish[k - 1] : 0.0, issue) + length <= due + SLACK) lo = mid + 1;
        else hi = mid;
    }
    return PyLong_FromSsize_t(lo);
}

/* latest_fitting(starts, low, top, length, due): the largest i in [low, top] whose copy
 * issued at starts[i] fits, else None. */
static PyObject *Queue_latest_fitting(Queue *q, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t low, top;
    double length, due;
    if (nargs != 5 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "latest_fitting(starts: list, low, top, length, due)");
        return NULL;
    }
    if (read_index(args[1], &low) || read_index(args[2], &top) || as_double(args[3], &length)
        || as_double(args[4], &due))
        return NULL;
    for (Py_ssize_t i = top; i >= low; i--) {
        double issue;
        if (start_at(args[0], i, &issue)) return NULL;
        if (fits(q, issue, length, due)) return PyLong_FromSsize_t(i);
    }
    Py_RETURN_NONE;
}

/* __getstate__: (issues, lengths, dues, finishes or None, tolerances or None, absorbed
 * delays or None), the caches as they are (None: not computed). */
static PyObject *Queue_getstate(Queue *q, PyObject *Py_UNUSED(ignored)) {
    Py_ssize_t n = q->n;
    PyObject *items[6] = {list_of(q->issue, n), list_of(q->length, n), list_of(q->due, n),
                          NULL, NULL, NULL};
    int ok = items[0] && items[1] && items[2];
    if (ok && q->finishes_valid) ok = (items[3] = list_of(q->finish, n)) != NULL;
    if (ok && q->finishes_valid && q->tolerances_valid) {
        ok = (items[4] = list_of(q->tol, n)) && (items[5] = list_of(q->after, n));
    }
    if (!ok) {
        for (int i = 0; i < 6; i++) Py_XDECREF(items[i]);
        return NULL;
    }
    for (int i = 3; i < 6; i++) if (!items[i]) items[i] = Py_NewRef(Py_None);
    PyObject *state = PyTuple_New(6);
    if (!state) {
        for (int i = 0; i < 6; i++) Py_DECREF(items[i]);
        return NULL;
    }
    for (int i = 0; i < 6; i++) PyTuple_SET_ITEM(state, i, items[i]);
    return state;
}

/* __setstate__: the queue from a __getstate__ tuple (finishes may be None; tolerances and
 * absorbed delays are both None or both lists, and only with the finishes). */
static PyObject *Queue_setstate(Queue *q, PyObject *state) {
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 6
        || !PyList_Check(PyTuple_GET_ITEM(state, 0))) {
        PyErr_SetString(PyExc_ValueError, "CopyQueue state: expected a 6-tuple of lists");
        return NULL;
    }
    PyObject *finishes = PyTuple_GET_ITEM(state, 3), *tol = PyTuple_GET_ITEM(state, 4),
             *after = PyTuple_GET_ITEM(state, 5);
    if ((tol == Py_None) != (after == Py_None) || (finishes == Py_None && tol != Py_None)) {
        PyErr_SetString(PyExc_ValueError,
                        "CopyQueue state: tolerances need finishes and absorbed delays");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(PyTuple_GET_ITEM(state, 0));
    if (reserve(q, n)) return NULL;
    q->n = 0;
    q->finishes_valid = q->tolerances_valid = 0;
    double *arrays[] = {q->issue, q->length, q->due, q->finish, q->tol, q->after};
    for (int i = 0; i < 6; i++) {
        PyObject *item = PyTuple_GET_ITEM(state, i);
        if (item != Py_None && read_list(item, n, arrays[i])) return NULL;
    }
    q->n = n;
    q->finishes_valid = finishes != Py_None;
    q->tolerances_valid = tol != Py_None;
    Py_RETURN_NONE;
}

static PyObject *Queue_issues(Queue *q, void *Py_UNUSED(closure)) {
    return list_of(q->issue, q->n);
}

static PyObject *Queue_lengths(Queue *q, void *Py_UNUSED(closure)) {
    return list_of(q->length, q->n);
}

static PyObject *Queue_dues(Queue *q, void *Py_UNUSED(closure)) {
    return list_of(q->due, q->n);
}

#define FAST_KW (METH_FASTCALL | METH_KEYWORDS)

static PyMethodDef Queue_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Queue_add, FAST_KW,
     "add(issue, length, due=inf): queue a copy behind those issued at or before `issue`."},
    {"remove", (PyCFunction)Queue_remove, METH_O,
     "remove(copy): take back a copy added with these numbers (ValueError if none)."},
    {"_set_aside", (PyCFunction)Queue_set_aside, METH_O,
     "_set_aside(copy) -> (index, caches): remove the copy, saying where it was and which "
     "caches were computed (0, 1 finishes, 2 finishes and tolerances)."},
    {"_put_back", (PyCFunction)(void (*)(void))Queue_put_back, METH_FASTCALL,
     "_put_back(copy, index, caches): undo _set_aside."},
    {"finishes", (PyCFunction)Queue_finishes, METH_NOARGS,
     "finishes() -> list: every queued copy's finish time (a new list)."},
    {"tolerances", (PyCFunction)Queue_tolerances, METH_NOARGS,
     "tolerances() -> list: how much later each copy may finish (a new list)."},
    {"finish_if_added", (PyCFunction)(void (*)(void))Queue_finish_if_added, FAST_KW,
     "finish_if_added(issue, length) -> float"},
    {"fits", (PyCFunction)(void (*)(void))Queue_fits, FAST_KW,
     "fits(issue, length, due) -> bool"},
    {"lateness", (PyCFunction)(void (*)(void))Queue_lateness, FAST_KW,
     "lateness(issue, length, due) -> float"},
    {"end_growth", (PyCFunction)(void (*)(void))Queue_end_growth, FAST_KW,
     "end_growth(issue, length, end) -> float"},
    {"first_late", (PyCFunction)(void (*)(void))Queue_first_late, METH_FASTCALL,
     "first_late(starts, lo, hi, length, due) -> int"},
    {"latest_fitting", (PyCFunction)(void (*)(void))Queue_latest_fitting, METH_FASTCALL,
     "latest_fitting(starts, low, top, length, due) -> int | None"},
    {"__getstate__", (PyCFunction)Queue_getstate, METH_NOARGS,
     "(issues, lengths, dues, finishes, tolerances, absorbed); None: not computed."},
    {"__setstate__", (PyCFunction)Queue_setstate, METH_O, "the queue from __getstate__."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Queue_getset[] = {
    {"issues", (getter)Queue_issues, NULL, "issue times in queue order (a new list)", NULL},
    {"lengths", (getter)Queue_lengths, NULL, "copy lengths in queue order (a new list)", NULL},
    {"dues", (getter)Queue_dues, NULL, "due times in queue order (a new list)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject QueueType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupool.planning.budget.engine._copyq.CopyQueue",
    .tp_doc = "One FIFO copy engine's queue (see cupool.planning.budget.engine.copies).",
    .tp_basicsize = sizeof(Queue),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = Queue_new,
    .tp_dealloc = (destructor)Queue_dealloc,
    .tp_methods = Queue_methods,
    .tp_getset = Queue_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_copyq",
    .m_doc = "Compiled copy queue of cupool.planning.budget.engine.copies (identical answers).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__copyq(void) {
    if (PyType_Ready(&QueueType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&QueueType);
    if (PyModule_AddObject(m, "CopyQueue", (PyObject *)&QueueType) < 0) {
        Py_DECREF(&QueueType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
